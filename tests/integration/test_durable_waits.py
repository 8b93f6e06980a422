"""A run waits durably for an event: it subscribes, releases its worker, and resumes when
a matching input is logged — whether the input comes after the wait, before it, or its
signal is lost and the relay has to re-send it."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from adapters.waits import WaitStore
from contracts.run import RunState
from contracts.status import RunStatus
from tests.helpers import running_worker, spawn_worker, spec, start, stop_worker, write_script


def _script(tmp_path: Path, subject: str, timeout_s: int = 600) -> Path:
    call = {
        "name": "wait_for_event",
        "arguments": {"type": "deploy.finished", "subject": subject, "timeout_s": timeout_s},
    }
    return write_script(tmp_path, [{"tool_calls": [call]}, {"text": "got: {{last_tool_output}}"}])


async def _waiting(handle: WorkflowHandle[Any, Any]) -> RunState:
    for _ in range(400):
        state: RunState = await handle.query("get_state", result_type=RunState)
        if state.status is RunStatus.WAITING:
            return state
        await asyncio.sleep(0.05)
    raise AssertionError("run never waited")


# `groundwork input submit` waking a waiting run goes through the trigger service now:
# tests/integration/test_cli_inputs.py.


async def test_an_input_logged_before_the_wait_is_found_at_install(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path
) -> None:
    subject = f"svc-{uuid.uuid4().hex[:8]}"
    script = write_script(
        tmp_path,
        [{"text": "", "tool_calls": [{"name": "wait_for_event", "arguments": {"type": "deploy.finished", "subject": subject}}], "delay_s": 1.0},
         {"text": "got: {{last_tool_output}}"}],
    )  # fmt: skip
    run = spec(f"scripted:{script}", agent="watcher")
    async with (
        AsyncConnectionPool(
            migrated_database, min_size=1, max_size=2, kwargs={"autocommit": True}
        ) as pool,
        running_worker(client, task_queue, migrated_database),
    ):
        handle = await start(client, run, task_queue)
        await asyncio.sleep(0.3)  # the run has started; its model turn is still thinking
        await WaitStore(pool).submit(
            "deploy.finished", subject, {"early": True}
        )  # nobody signals it
        result = await handle.result()
        state = await handle.query("get_state", result_type=RunState)
    assert '"early": true' in (result.final_output or "")
    assert "WaitingForEvent" not in [e.type for e in state.last_events]  # never had to wait


async def test_a_lost_signal_is_relayed_by_the_worker(
    temporal_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    migrated_database: str,
    tmp_path: Path,
) -> None:
    subject = f"svc-{uuid.uuid4().hex[:8]}"
    run = spec(f"scripted:{_script(tmp_path, subject)}", agent="watcher")
    address = temporal_env.client.service_client.config.target_host
    worker = spawn_worker(address, migrated_database, task_queue, tmp_path / "worker.log")
    try:
        handle = await start(client, run, task_queue)
        await _waiting(handle)
        async with AsyncConnectionPool(
            migrated_database, min_size=1, max_size=2, kwargs={"autocommit": True}
        ) as pool:
            # Logged and delivered, but the sender "dies" before signalling the run.
            _, deliveries = await WaitStore(pool).submit(
                "deploy.finished", subject, {"relayed": True}
            )
        assert len(deliveries) == 1
        result = await asyncio.wait_for(handle.result(), timeout=30)
    finally:
        stop_worker(worker)
    assert '"relayed": true' in (result.final_output or "")


@pytest.mark.parametrize("worker_down", [True])
async def test_worker_down_while_the_event_arrives(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path, worker_down: bool
) -> None:
    subject = f"svc-{uuid.uuid4().hex[:8]}"
    run = spec(f"scripted:{_script(tmp_path, subject)}", agent="watcher")
    async with running_worker(client, task_queue, migrated_database):
        handle = await start(client, run, task_queue)
        await _waiting(handle)
    async with AsyncConnectionPool(
        migrated_database, min_size=1, max_size=2, kwargs={"autocommit": True}
    ) as pool:
        store = WaitStore(pool)
        _, deliveries = await store.submit("deploy.finished", subject, {"while": "down"})
        for delivery in deliveries:  # Temporal keeps the signal until a worker returns
            await handle.signal("deliver_input", delivery)
        await store.mark_signaled(deliveries)
    async with running_worker(client, task_queue, migrated_database):
        result = await handle.result()
    assert '"while": "down"' in (result.final_output or "")
