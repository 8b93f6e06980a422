"""Temporal cancellation ends a run CANCELLED; a run id names one run, running or ended; a bad
workflow id is refused."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import WorkflowEnvironment

from contracts.run import RunSpec, RunState
from contracts.search_attributes import GW_STATUS
from contracts.status import RunStatus
from tests.helpers import ROOT, cli_env, running_worker, spec, start, write_script


async def _wait_for_step(handle: object, step: int) -> None:
    for _ in range(200):
        state = await handle.query("get_state", result_type=RunState)  # type: ignore[attr-defined]
        if state.usage.steps >= step:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"run never reached step {step}")


def _slow_run(tmp_path: Path) -> RunSpec:
    """A run that makes one tool call, then takes 30 s over its answer: time to cancel it."""
    script = write_script(
        tmp_path,
        [
            {"tool_calls": [{"name": "produce", "arguments": {"size": 8}}]},
            {"text": "late", "delay_s": 30},
        ],
    )
    return spec(f"scripted:{script}", agent="filler")


async def test_cancel_ends_run_cancelled(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path
) -> None:
    run = _slow_run(tmp_path)
    async with running_worker(client, task_queue, migrated_database):
        handle = await start(client, run, task_queue)
        await _wait_for_step(handle, 2)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        state = await handle.query("get_state", result_type=RunState)
        description = await handle.describe()
    assert isinstance(failure.value.cause, CancelledError)
    assert state.status is RunStatus.CANCELLED
    assert description.status is WorkflowExecutionStatus.CANCELED
    assert description.typed_search_attributes.get(GW_STATUS) == "Cancelled"


async def test_starting_the_same_run_twice_returns_the_same_run(
    client: Client, task_queue: str, migrated_database: str
) -> None:
    run = spec("scripted:source-reader-demo")
    async with running_worker(client, task_queue, migrated_database):
        first = await start(client, run, task_queue)
        second = await start(client, run, task_queue)
        assert first.result_run_id == second.result_run_id
        result = await first.result()
        # Once it has ended, starting it again (a trigger activation replayed after a crash,
        # a client whose first answer was lost) is still that run, not an error, not a new one.
        third = await start(client, run, task_queue)
        assert third.result_run_id == first.result_run_id
        assert await third.result() == result
        runs = [e async for e in client.list_workflows(f'WorkflowId = "run-{run.run_id}"')]
    assert len(runs) == 1


async def test_workflow_id_must_match_run_id(
    client: Client, task_queue: str, migrated_database: str
) -> None:
    run = spec("scripted:source-reader-demo")
    async with running_worker(client, task_queue, migrated_database):
        handle = await client.start_workflow(
            "AgentRun", run, id=f"not-run-{run.run_id}", task_queue=task_queue
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
    assert isinstance(failure.value.cause, ApplicationError)
    assert "workflow id must be" in str(failure.value.cause)


async def test_cli_cancels_a_running_run_and_refuses_an_ended_one(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, migrated_database: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    env = cli_env(
        GROUNDWORK_TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
        GROUNDWORK_DATABASE_URL=migrated_database,
    )

    def cancel(run_id: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli", "run", "cancel", run_id],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    run = _slow_run(tmp_path)
    async with running_worker(client, task_queue, migrated_database):
        handle = await start(client, run, task_queue)
        await _wait_for_step(handle, 2)
        requested = await asyncio.to_thread(cancel, run.run_id)
        assert requested.returncode == 0, requested.stderr
        assert requested.stdout.strip() == f"cancellation requested for run {run.run_id}"
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    # Temporal would take a second request without a word; the CLI says the run has ended.
    again = await asyncio.to_thread(cancel, run.run_id)
    assert again.returncode == 1
    assert (
        again.stderr.strip() == f"error: run {run.run_id} has ended (Cancelled); nothing to cancel"
    )
    missing = await asyncio.to_thread(cancel, "no-such-run")
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: cannot cancel run 'no-such-run'")
