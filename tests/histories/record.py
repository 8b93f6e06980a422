"""Record the committed replay histories: `python -m tests.histories.record`.

Needs a running stack whose worker has a "notes" target and an approver "alice", e.g.:
  export GROUNDWORK_APPROVERS='{"alice": {"secret": "change-me", "roles": ["editor"]}}'
  export GROUNDWORK_TARGETS='{"notes": {"kind": "git", "path": ".groundwork/docs-site"}}'
  groundwork up --detach && python -m tests.histories.record

Session histories (and the steered run) come from `GROUNDWORK_RECORD_HISTORIES=tests/histories
pytest tests/integration/test_sessions.py` (rename the session files to say what they show).

Re-record only on purpose, and keep the old files: a history that no longer replays means
the workflow changed in a way running workflows would notice, which needs workflow
versioning, not a new file.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client, WorkflowHandle
from ulid import ULID

from adapters.waits import WaitStore
from contracts.approvals import ApprovalDecision, DecisionResult, Verdict, sign
from contracts.run import Release, RunSpec
from tests.helpers import state_until
from workers.client import connect
from workers.endpoints import resolve
from workers.relay import signal_deliveries
from workers.run_client import start_run
from workers.settings import Settings

HERE = Path(__file__).parent


def _spec(case: str, agent: str, route: str, text: str) -> RunSpec:
    return RunSpec(
        run_id=f"history-{case}-{str(ULID()).lower()}",
        release=Release(agent=agent, model_route=route),
        input=text,
    )


async def _approve(handle: WorkflowHandle[Any, Any], settings: Settings) -> None:
    state = await state_until(handle, lambda s: s.pending_approval is not None)
    pending = state.pending_approval
    assert pending is not None
    unsigned = ApprovalDecision(
        approval_id=pending.approval_id, verdict=Verdict.APPROVE, principal="alice", subject=pending.subject,
        revision=pending.revision, content_hash=pending.content_hash, destination=pending.destination,
        scope=pending.scope,
    )  # fmt: skip
    secret = settings.approvers["alice"].secret.get_secret_value()
    decision = unsigned.model_copy(update={"signature": sign(unsigned, secret)})
    await handle.execute_update("decide_approval", decision, result_type=DecisionResult)


async def _deliver(client: Client, handle: WorkflowHandle[Any, Any], database_url: str) -> None:
    await state_until(handle, lambda s: s.waiting_reason is not None)
    async with AsyncConnectionPool(
        database_url, min_size=1, max_size=1, kwargs={"autocommit": True}
    ) as pool:
        store = WaitStore(pool)
        _, deliveries = await store.submit("deploy.finished", "service-a", {"version": "1.4.2"})
        await signal_deliveries(client, store, deliveries)


async def main() -> None:
    settings = Settings()
    found = resolve(settings)
    client = await connect(found.temporal_address, settings.temporal_namespace)
    cases = [
        (
            _spec(
                "source-reader",
                "source-reader",
                "scripted:source-reader-demo",
                "Where is RetryPolicy?",
            ),
            None,
        ),
        (
            _spec("reviewed-note", "notes-writer", "scripted:notes-writer-reviewed", "publish r8"),
            "approve",
        ),
        (
            _spec(
                "watcher", "watcher", "scripted:watcher-demo", "tell me when service-a is deployed"
            ),
            "deliver",
        ),
    ]
    for spec, action in cases:
        handle = await start_run(client, spec, settings.task_queue)
        if action == "approve":
            await _approve(handle, settings)
        elif action == "deliver":
            await _deliver(client, handle, found.database_url)
        await handle.result()
        history = await handle.fetch_history()
        # Named after the workflow id: replay needs it (the run checks its own id).
        (HERE / f"{handle.id}.json").write_text(history.to_json())
        print(f"recorded {handle.id} ({len(history.events)} events)")


if __name__ == "__main__":
    asyncio.run(main())
