"""SIGKILL of a real worker right after one ledger statement carrying several dispatches'
claims and settles has committed, before any of those dispatches has its answer.

The five crash windows (test_effect_crash_windows.py) run one dispatch at a time, so the
ledger never shares a statement there. Here six runs dispatch at once and the test makes
them share one: it holds a table lock on `effects` until two ledger statements are blocked
on it (both of the ledger's slots) and the other four calls wait in its queue, two runs'
claims and two runs' settles (their target calls held by the HTTP service's hang fault
meanwhile). Released, the four go as one statement, and the worker dies once it commits.
Every run must still complete with exactly one effect at the target, counted there.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from activities._faults import SHARED_COMMIT
from contracts.effects import EFFECT_DISPATCH_ACTIVITY, EffectStatus
from contracts.run import ActivityTimeouts, RunSpec
from contracts.status import RunStatus
from definitions.notes_writer import note_effect_key
from tests.chaos.evidence import ledger_state, log_events
from tests.helpers import (
    arm_fault,
    publish_note_script,
    spawn_worker,
    spec,
    start,
    stop_worker,
    target_commits,
)


async def _until(check: Any, what: str, attempts: int = 400) -> None:
    for _ in range(attempts):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def _dispatch_started(handle: WorkflowHandle[Any, Any]) -> bool:
    described = await handle.describe()
    return any(
        a.activity_type.name == EFFECT_DISPATCH_ACTIVITY
        and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        for a in described.raw_description.pending_activities
    )


async def test_crash_after_a_shared_statement_commits_leaves_one_effect_each(
    temporal_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    migrated_database: str,
    tmp_path: Path,
    target_url: str,
) -> None:
    tag = uuid.uuid4().hex[:8]
    names = ("held-c", "held-d", "a", "b", "e", "f")  # held-*: their target calls hang 4 s
    runs: dict[str, tuple[RunSpec, str]] = {}
    for name in names:
        arguments = {"note_id": f"{name}-{tag}", "revision": 1, "content": f"# {name}\n"}
        (tmp_path / name).mkdir()
        run = spec(
            f"scripted:{publish_note_script(tmp_path / name, arguments)}",
            agent="notes-writer",
            timeouts=ActivityTimeouts(heartbeat_s=1.0, tool_call_s=15),
        )
        runs[name] = (run, note_effect_key(arguments))
    key = {name: k for name, (_, k) in runs.items()}
    marker = tmp_path / "crashed"
    env = {
        "GROUNDWORK_TARGETS": json.dumps(
            {"notes": {"kind": "http", "base_url": target_url, "timeout_s": 10}}
        ),
        "GROUNDWORK_CRASH_AT": SHARED_COMMIT,
        "GROUNDWORK_CRASH_MARKER": str(marker),
        "GROUNDWORK_STICKY_TIMEOUT_S": "1",
    }
    arm_fault(target_url, mode="hang", hang_s=4.0, times=2, key_prefix="note-held-", method="POST")
    address = temporal_env.client.service_client.config.target_host
    first = spawn_worker(address, migrated_database, task_queue, tmp_path / "w1.log", **env)
    handles: dict[str, WorkflowHandle[Any, Any]] = {}
    try:
        async with await psycopg.AsyncConnection.connect(
            migrated_database, autocommit=True
        ) as probe:

            async def statuses(*names: str) -> list[str | None]:
                cur = await probe.execute(
                    "SELECT effect_key, status FROM effects WHERE effect_key = ANY(%s)",
                    ([key[n] for n in names],),
                )
                found = dict(await cur.fetchall())
                return [found.get(key[n]) for n in names]

            async def lock_waiters() -> int:
                cur = await probe.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%groundwork_%'"
                )
                row = await cur.fetchone()
                return int(row[0]) if row else 0

            for name in ("held-c", "held-d"):
                handles[name] = await start(client, runs[name][0], task_queue)

            async def held_sent() -> bool:
                return await statuses("held-c", "held-d") == ["dispatching", "dispatching"]

            await _until(held_sent, "the held runs' claims")
            held = ("held-c", "held-d")

            async def queued() -> bool:
                started = [await _dispatch_started(handles[n]) for n in "abef"]
                return all(started) and await lock_waiters() == 2

            async def held_committed() -> bool:
                return all(target_commits(target_url, key[n]) == 1 for n in held)

            locker = await psycopg.AsyncConnection.connect(migrated_database)
            async with locker, locker.transaction():
                # Claims and settles both write `effects`: every one of them waits from here.
                await locker.execute("LOCK TABLE effects IN EXCLUSIVE MODE")
                for name in "abef":
                    handles[name] = await start(client, runs[name][0], task_queue)
                await _until(queued, "two ledger statements blocked, four dispatches in")
                early = [target_commits(target_url, key[n]) for n in held]
                assert early == [0, 0], "the held target calls ended before the claims queued"
                # The held target calls end, commit at the target, and settle: into the
                # ledger's queue, behind the two blocked statements.
                await _until(held_committed, "the held target calls", attempts=200)
                await asyncio.sleep(0.5)  # time for their settles to reach the queue
            await asyncio.to_thread(first.wait, 20)  # the lock is gone: it dies at the commit
        assert first.returncode == -9, f"worker was not killed: {first.returncode}"
        point, *items = marker.read_text().split()
        assert point == SHARED_COMMIT
        shared = sorted(items)
        settles = sorted(f"settle:{key[n]}" for n in ("held-c", "held-d"))
        assert [i for i in shared if i.startswith("settle:")] == settles, shared
        claimed = [i.removeprefix("claim:") for i in shared if i.startswith("claim:")]
        assert len(claimed) == 2, shared
        assert set(claimed) <= {key[n] for n in "abef"}, shared
        second = spawn_worker(address, migrated_database, task_queue, tmp_path / "w2.log", **env)
        try:
            results = await asyncio.wait_for(
                asyncio.gather(*(h.result() for h in handles.values())), timeout=90
            )
        finally:
            stop_worker(second)
    finally:
        stop_worker(first)

    for name, result in zip(handles, results, strict=True):
        run, k = runs[name]
        assert result.status is RunStatus.COMPLETED, (name, result)
        assert result.final_output is not None
        assert result.final_output.startswith(f"ok: effect {k} committed"), result.final_output
        assert target_commits(target_url, k) == 1, name
        record, events = await ledger_state(migrated_database, k, run.run_id)
        assert record is not None, name
        assert record.status is EffectStatus.SUCCEEDED, (name, record)
        assert record.external_ref
        assert [e["type"] for e in events] == ["NotePublished"], name
    # After the crash: the two settled in the shared statement were answered from the ledger,
    # not sent again; the two claimed in it were reconciled with the target first.
    after = [e for e in log_events(tmp_path / "w2.log") if e.get("effect_key")]
    replayed = {e["effect_key"] for e in after if e["event"] == "effect_already_settled"}
    assert {key["held-c"], key["held-d"]} <= replayed, after
    reconciled = {e["effect_key"] for e in after if e["event"] == "effect_reconciled"}
    assert set(claimed) <= reconciled, after
