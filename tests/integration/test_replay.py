"""Committed histories must replay on the current workflow code (determinism guard)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.helpers import replayer
from workers.worker import prepare_agents_sdk, sandbox_runner
from workflows.agent_run import AgentRunWorkflow

HISTORIES = sorted((Path(__file__).parents[1] / "histories").glob("*.json"))


def test_there_are_committed_histories() -> None:
    assert HISTORIES, (
        "tests/histories/*.json is empty; record with python -m tests.histories.record"
    )


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_committed_history_replays(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    result = await replayer().replay_workflow(history)
    assert result.replay_failure is None


async def test_replay_detects_a_divergent_run() -> None:
    """Control: the same history under another workflow id takes another path and must fail."""
    prepare_agents_sdk()
    replayer = Replayer(
        workflows=[AgentRunWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )
    first_run = next(p for p in HISTORIES if p.stem.startswith("run-"))
    history = WorkflowHistory.from_json("run-some-other-id", first_run.read_text())
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is not None
