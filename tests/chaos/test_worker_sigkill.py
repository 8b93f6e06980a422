"""SIGKILL the worker process in the middle of a run; a new worker finishes it without
repeating any model turn that had completed (counted at the scripted model itself)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from contracts.run import ActivityTimeouts, Budgets
from contracts.status import RunStatus
from tests.helpers import spawn_worker, spec, start, write_script

ROOT = Path(__file__).parents[2]


async def _wait_for(predicate: object, within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _turns(call_log: Path) -> list[int]:
    if not call_log.exists():
        return []
    return [json.loads(line)["turn"] for line in call_log.read_text().splitlines() if line]


async def test_sigkilled_worker_mid_turn_resumes_without_repeating_completed_turns(
    temporal_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    migrated_database: str,
    tmp_path: Path,
) -> None:
    produce = {"name": "produce", "arguments": {"size": 64}}
    script = write_script(
        tmp_path,
        [
            {"tool_calls": [produce]},
            {"tool_calls": [produce]},
            {"tool_calls": [produce], "delay_s": 3.0},  # the turn in flight when the worker dies
            {"text": "finished"},
        ],
    )
    call_log = tmp_path / "model-calls.jsonl"
    run = spec(
        f"scripted:{script}",
        agent="filler",
        budgets=Budgets(max_steps=10),
        timeouts=ActivityTimeouts(heartbeat_s=1.0),
    )
    address = temporal_env.client.service_client.config.target_host
    log_env = {"GROUNDWORK_SCRIPTED_CALL_LOG": str(call_log)}
    first = spawn_worker(address, migrated_database, task_queue, tmp_path / "w1.log", **log_env)
    try:
        handle = await start(client, run, task_queue)
        await _wait_for(lambda: 2 in _turns(call_log), 60, "model turn 3 to start")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
        assert not (await handle.describe()).close_time, "run must still be open after the kill"
        second = spawn_worker(
            address, migrated_database, task_queue, tmp_path / "w2.log", **log_env
        )
        try:
            result = await asyncio.wait_for(handle.result(), timeout=90)
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert result.status is RunStatus.COMPLETED
    assert result.final_output == "finished"
    counts = Counter(_turns(call_log))
    # Completed turns ran once; only the turn in flight at the kill ran again.
    assert counts[0] == 1, counts
    assert counts[1] == 1, counts
    assert counts[3] == 1, counts
    assert counts[2] == 2, counts
    assert result.usage.steps == 4
