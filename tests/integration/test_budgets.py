"""Each budget stops a run FAILED(budget) before the action it does not allow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from contracts.run import Budgets, RunState
from contracts.status import FailureReason, RunStatus
from tests.helpers import running_worker, spec, start, write_script

PRODUCE = {"tool_calls": [{"name": "produce", "arguments": {"size": 16}}]}


def model_calls(log: Path) -> list[int]:
    if not log.exists():
        return []
    return [json.loads(line)["turn"] for line in log.read_text().splitlines()]


@pytest.mark.parametrize(
    ("budgets", "turn", "expected_calls", "expected_tools", "message"),
    [
        (Budgets(max_steps=3), PRODUCE, 3, 3, "max_steps=3"),
        (Budgets(max_tool_calls=2), PRODUCE, 3, 2, "max_tool_calls=2"),
        (
            Budgets(max_tokens=1000),
            {**PRODUCE, "input_tokens": 400, "output_tokens": 100},
            2,
            2,
            "max_tokens=1000",
        ),
    ],
    ids=["steps", "tool_calls", "tokens"],
)
async def test_budget_exhaustion_fails_run_before_next_action(
    client: Client,
    task_queue: str,
    migrated_database: str,
    tmp_path: Path,
    budgets: Budgets,
    turn: dict[str, object],
    expected_calls: int,
    expected_tools: int,
    message: str,
) -> None:
    script = write_script(tmp_path, [turn], repeat_last=True)
    log = tmp_path / "calls.jsonl"
    run = spec(f"scripted:{script}", agent="filler", budgets=budgets)
    async with running_worker(client, task_queue, migrated_database, scripted_call_log=log):
        handle = await start(client, run, task_queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        state = await handle.query("get_state", result_type=RunState)
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "RunFailed.budget"
    assert message in str(cause)
    assert state.status is RunStatus.FAILED
    assert state.failure_reason is FailureReason.BUDGET
    assert len(model_calls(log)) == expected_calls
    assert state.usage.tool_calls == expected_tools
    assert [e.type for e in state.last_events][-1] == "RunFailed"
