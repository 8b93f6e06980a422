"""Approval expiry is a durable timer: with time skipping the 24 h TTL passes at once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.client import WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from adapters.approvals import ApprovalStore
from contracts.approvals import ApprovalStatus
from contracts.run import RunState
from contracts.status import FailureReason, RunStatus
from definitions.notes_writer import note_effect_key
from tests.helpers import running_worker, spec, start, write_script
from workers.binaries import temporal_binary
from workers.dev_server import embedded_dev_server_args


@pytest.fixture(scope="module")
async def skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_time_skipping_v2(
        dev_server_existing_path=str(temporal_binary()),
        data_converter=pydantic_data_converter,
        dev_server_extra_args=[
            *embedded_dev_server_args(), "--log-level", "error",
            "--dynamic-config-value", "frontend.WorkflowTimeSkippingEnabled=true",
        ],
    )  # fmt: skip
    try:
        yield env
    finally:
        await env.shutdown()


async def test_unanswered_approval_expires_and_fails_the_run(
    skipping_env: WorkflowEnvironment,
    task_queue: str,
    migrated_database: str,
    tmp_path: Path,
    target_url: str,
) -> None:
    client = skipping_env.client
    arguments = {
        "note_id": f"expiring-{task_queue[-8:]}",
        "revision": 2,
        "content": "# never approved\n",
    }
    script = write_script(
        tmp_path,
        [
            {"tool_calls": [{"name": "publish_reviewed_note", "arguments": arguments}]},
            {"text": "done"},
        ],
    )
    run = spec(f"scripted:{script}", agent="notes-writer")
    targets = {"notes": {"kind": "http", "base_url": target_url}}
    async with running_worker(client, task_queue, migrated_database, targets=targets):
        handle = await start(client, run, task_queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        state = await handle.query("get_state", result_type=RunState)
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "RunFailed.approval_expired"
    assert state.status is RunStatus.FAILED
    assert state.failure_reason is FailureReason.APPROVAL_EXPIRED
    key = note_effect_key(arguments)
    stats = httpx2.get(f"{target_url}/stats", timeout=5).json()
    assert stats["commits"].get(key, 0) == 0
    async with AsyncConnectionPool(
        migrated_database, min_size=1, max_size=1, kwargs={"autocommit": True}
    ) as pool:
        rows = await ApprovalStore(pool).list_approvals(run_id=run.run_id)
    assert [r.status for r in rows] == [ApprovalStatus.EXPIRED]


async def test_re_request_asks_again_up_to_its_cap_then_fails(
    skipping_env: WorkflowEnvironment,
    task_queue: str,
    migrated_database: str,
    tmp_path: Path,
    target_url: str,
) -> None:
    client = skipping_env.client
    arguments = {"note_id": f"patient-{task_queue[-8:]}", "revision": 3, "content": "# later\n"}
    script = write_script(
        tmp_path,
        [
            {"tool_calls": [{"name": "publish_reviewed_note_patiently", "arguments": arguments}]},
            {"text": "done"},
        ],
    )
    run = spec(f"scripted:{script}", agent="notes-writer")
    targets = {"notes": {"kind": "http", "base_url": target_url}}
    async with running_worker(client, task_queue, migrated_database, targets=targets):
        handle = await start(client, run, task_queue)
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        state = await handle.query("get_state", result_type=RunState)
    assert state.failure_reason is FailureReason.APPROVAL_EXPIRED
    assert state.failure_message is not None
    assert "asked 3 times" in state.failure_message
    assert (
        httpx2.get(f"{target_url}/stats", timeout=5)
        .json()["commits"]
        .get(note_effect_key(arguments), 0)
        == 0
    )
    async with AsyncConnectionPool(
        migrated_database, min_size=1, max_size=1, kwargs={"autocommit": True}
    ) as pool:
        rows = await ApprovalStore(pool).list_approvals(run_id=run.run_id)
    assert [r.status for r in rows] == [ApprovalStatus.EXPIRED] * 3
    assert len({r.approval_id for r in rows}) == 3  # three distinct requests, each with its own id
