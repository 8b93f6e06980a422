"""The effect gateway end to end: idempotent replays, conflicts the model sees, waiting for a
human when the target cannot tell, the zombie attempt, and reads that never touch the ledger."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
from temporalio.client import Client, WorkflowHandle

from adapters.ledger import EffectLedger
from contracts.effects import EffectResolution, EffectStatus, ResolveEffectInput
from contracts.run import ActivityTimeouts, EffectClass, RunState, ToolPolicy
from contracts.status import RunStatus, WaitingReason
from definitions.notes_writer import note_effect_key
from tests.helpers import (
    arm_fault,
    publish_note_script,
    running_worker,
    spec,
    start,
    target_commits,
    write_script,
)


def _targets(url: str) -> dict[str, Any]:
    return {"notes": {"kind": "http", "base_url": url, "timeout_s": 3}}


def _args(note_id: str, **extra: Any) -> dict[str, Any]:
    return {"note_id": note_id, "revision": 1, "content": f"# {note_id}\n", **extra}


async def _wait_for_status(handle: WorkflowHandle[Any, Any], status: RunStatus) -> RunState:
    for _ in range(400):
        state: RunState = await handle.query("get_state", result_type=RunState)
        if state.status is status:
            return state
        await asyncio.sleep(0.05)
    raise AssertionError(f"run never reached {status}")


async def test_same_call_twice_is_one_effect_and_a_changed_request_is_a_conflict(
    client: Client,
    task_queue: str,
    migrated_database: str,
    tmp_path: Path,
    target_url: str,
    ledger: EffectLedger,
) -> None:
    note = f"twice-{task_queue[-8:]}"
    call = {"name": "publish_note", "arguments": _args(note)}
    changed = {"name": "publish_note", "arguments": _args(note, title="a different commit title")}
    script = write_script(
        tmp_path,
        [{"tool_calls": [call]}, {"tool_calls": [call]}, {"tool_calls": [changed]},
         {"text": "{{tool_output:0}}\n{{tool_output:1}}\n{{tool_output:2}}"}],
    )  # fmt: skip
    run = spec(f"scripted:{script}", agent="notes-writer")
    async with running_worker(client, task_queue, migrated_database, targets=_targets(target_url)):
        result = await (await start(client, run, task_queue)).result()
    key = note_effect_key(_args(note))
    first, second, third = (result.final_output or "").splitlines()
    assert first.startswith(f"ok: effect {key} committed")
    assert second == first  # the ledger answered; nothing was sent again
    assert third.startswith("error (conflict):"), third
    assert "nothing was sent" in third
    assert target_commits(target_url, key) == 1
    record = await ledger.get(key)
    assert record is not None
    assert record.status is EffectStatus.SUCCEEDED
    assert record.attempt == 1


@pytest.mark.parametrize("answer", [EffectResolution.COMMITTED, EffectResolution.NOT_COMMITTED])
async def test_unknown_outcome_waits_for_a_human(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path, target_url: str,
    ledger: EffectLedger, answer: EffectResolution,
) -> None:  # fmt: skip
    note = f"unknown-{answer.value}-{task_queue[-8:]}"
    key = note_effect_key(_args(note))
    script = publish_note_script(tmp_path, _args(note))
    # The send is lost without a commit and the target cannot answer lookups: nobody knows.
    arm_fault(target_url, mode="drop_before_commit", times=1, key_prefix=key, method="POST")
    arm_fault(target_url, mode="lookup_unknown", times=-1, key_prefix=key)
    # A deadline shorter than the human takes: their not_committed must start it again.
    policy = {"publish_note": ToolPolicy(effect_class=EffectClass.WRITE, send_within_s=3.0)}
    run = spec(
        f"scripted:{script}", agent="notes-writer", timeouts=ActivityTimeouts(tool_call_s=5),
        policy=policy,
    )  # fmt: skip
    async with running_worker(client, task_queue, migrated_database, targets=_targets(target_url)):
        handle = await start(client, run, task_queue)
        started = time.monotonic()
        state = await _wait_for_status(handle, RunStatus.WAITING)
        assert state.waiting_reason is WaitingReason.EFFECT_UNKNOWN
        record = await ledger.get(key)
        assert record is not None
        assert record.status is EffectStatus.REQUIRES_HUMAN
        assert target_commits(target_url, key) == 0
        httpx2.delete(f"{target_url}/faults", timeout=5).raise_for_status()
        await asyncio.sleep(max(0.0, 3.5 - (time.monotonic() - started)))  # past the deadline
        await handle.signal(
            "resolve_effect",
            ResolveEffectInput(
                effect_key=key,
                resolution=answer,
                external_ref="manual-ref-1",
                principal="ops@example",
            ),
        )
        result = await handle.result()
    assert result.status is RunStatus.COMPLETED
    record = await ledger.get(key)
    assert record is not None
    assert record.status is EffectStatus.SUCCEEDED
    events = [e for e in await ledger.events(run.run_id) if e["effect_key"] == key]
    assert [e["type"] for e in events] == ["NotePublished"]
    if answer is EffectResolution.COMMITTED:
        assert record.external_ref == "manual-ref-1"
        assert (
            target_commits(target_url, key) == 0
        )  # the human said it happened: nothing dispatched
    else:
        assert target_commits(target_url, key) == 1  # one dispatch after the human said it did not


async def test_zombie_attempt_settles_late_and_is_fenced_out(
    client: Client,
    task_queue: str,
    migrated_database: str,
    tmp_path: Path,
    target_url: str,
    ledger: EffectLedger,
) -> None:
    note = f"zombie-{task_queue[-8:]}"
    key = note_effect_key(_args(note))
    script = publish_note_script(tmp_path, _args(note))
    # The first send hangs past start_to_close; Temporal retries; then the first wakes up.
    arm_fault(target_url, mode="hang", hang_s=4.0, times=1, key_prefix=key, method="POST")
    run = spec(
        f"scripted:{script}",
        agent="notes-writer",
        timeouts=ActivityTimeouts(tool_call_s=2, heartbeat_s=5),
    )
    targets = {"notes": {"kind": "http", "base_url": target_url, "timeout_s": 10}}
    async with running_worker(client, task_queue, migrated_database, targets=targets):
        result = await (await start(client, run, task_queue)).result()
        for _ in range(200):  # the zombie settles after its 4 s hang
            phases = [(a.phase, a.outcome) for a in await ledger.attempts(key)]
            if ("settle", "stale_fence_rejected") in phases:
                break
            await asyncio.sleep(0.05)
    assert result.status is RunStatus.COMPLETED
    assert ("settle", "stale_fence_rejected") in phases, phases
    assert target_commits(target_url, key) == 1
    record = await ledger.get(key)
    assert record is not None
    assert record.status is EffectStatus.SUCCEEDED
    assert record.attempt >= 2


async def test_read_tools_never_touch_the_ledger(
    client: Client, task_queue: str, migrated_database: str, ledger: EffectLedger
) -> None:
    run = spec("scripted:source-reader-demo")
    async with running_worker(client, task_queue, migrated_database):
        result = await (await start(client, run, task_queue)).result()
    assert result.usage.tool_calls == 2
    assert await ledger.list_effects(run_id=run.run_id) == []
    assert await ledger.events(run.run_id) == []
    assert json.dumps(result.model_dump(mode="json"))


async def test_policy_snapshot_is_pinned_at_start_and_cannot_downgrade_an_effect(
    client: Client,
    task_queue: str,
    migrated_database: str,
    tmp_path: Path,
    target_url: str,
    ledger: EffectLedger,
) -> None:
    note = f"snap-{task_queue[-8:]}"
    script = publish_note_script(tmp_path, _args(note))
    run = spec(
        f"scripted:{script}",
        agent="notes-writer",
        policy={"publish_note": ToolPolicy(effect_class=EffectClass.READ)},
    )
    async with running_worker(client, task_queue, migrated_database, targets=_targets(target_url)):
        handle = await start(client, run, task_queue)
        result = await handle.result()
    assert (result.final_output or "").startswith("ok: effect")
    record = await ledger.get(note_effect_key(_args(note)))
    assert record is not None  # went through the ledger despite the snapshot saying read
    assert record.effect_class is EffectClass.WRITE
    default = spec("scripted:notes-writer-demo", agent="notes-writer")
    async with running_worker(client, task_queue, migrated_database, targets=_targets(target_url)):
        pinned = await start(client, default, task_queue)
        await pinned.result()
        history = await pinned.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes.input.payloads[0].data
    assert json.loads(started)["policy"]["publish_note"]["effect_class"] == "write"


async def test_each_dispatch_logs_its_transition_with_run_effect_attempt_and_fence(
    migrated_database: str, target_url: str, ledger: EffectLedger
) -> None:
    """The worker's own JSON logging, around the real dispatch activity and the HTTP target:
    an answer lost after the commit, then the retry that reconciles it."""
    import dataclasses
    import io
    import uuid
    from datetime import UTC, datetime

    import structlog
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from activities.effects import EffectActivities
    from adapters.targets.registry import TargetConfig, TargetRegistry
    from contracts.effects import EFFECT_DISPATCH_ACTIVITY, EffectDispatchInput, PreparedCall
    from contracts.prepare import prepare
    from workers.logs import configure_logging

    run_id = f"logs-{uuid.uuid4().hex[:8]}"
    arguments = _args(run_id)
    key = note_effect_key(arguments)
    call = prepare(
        run_id=run_id, agent_name="notes-writer", owner_agent="notes-writer",
        tool_name="publish_note", call_id="c1", arguments=arguments,
        policy=ToolPolicy(effect_class=EffectClass.IDEMPOTENT_WRITE), target="notes",
        effect_key=key, domain_event="NotePublished", now=datetime.now(UTC),
    )  # fmt: skip
    assert isinstance(call, PreparedCall)
    arm_fault(target_url, mode="commit_then_drop", times=1, key_prefix=key, method="POST")
    targets = TargetRegistry({"notes": TargetConfig(kind="http", base_url=target_url, timeout_s=3)})
    acts = EffectActivities(ledger, targets)
    env = ActivityEnvironment()
    base = dataclasses.replace(
        ActivityEnvironment.default_info(), activity_type=EFFECT_DISPATCH_ACTIVITY,
        workflow_id=f"run-{run_id}", workflow_type="AgentRun",
    )  # fmt: skip
    buf = io.StringIO()
    saved_config, saved_handlers = structlog.get_config(), logging.getLogger().handlers[:]
    saved_level = logging.getLogger().level
    configure_logging("INFO", stream=buf)
    try:
        env.info = dataclasses.replace(base, attempt=1)
        with pytest.raises(ApplicationError, match="unknown"):
            await env.run(acts.dispatch, EffectDispatchInput(call=call, max_attempts=5))
        env.info = dataclasses.replace(base, attempt=2)
        outcome = await env.run(acts.dispatch, EffectDispatchInput(call=call, max_attempts=5))
    finally:
        structlog.configure(**saved_config)
        logging.getLogger().handlers[:] = saved_handlers
        logging.getLogger().setLevel(saved_level)
        await targets.close()
    assert outcome.status is EffectStatus.SUCCEEDED
    assert target_commits(target_url, key) == 1
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    ours = [line for line in lines if line.get("effect_key") == key]
    for line in ours:
        assert line["run_id"] == run_id
        assert line["workflow_id"] == f"run-{run_id}"
        assert line["activity"] == EFFECT_DISPATCH_ACTIVITY
    steps = [(ln["event"], ln["attempt"], ln.get("fence"), ln.get("status_from"), ln.get("status_to"))
             for ln in ours if ln["event"] != "effect_reconciled"]  # fmt: skip
    assert steps == [
        # attempt 1: a first claim is a debug line; its outcome names the transition
        ("effect_settled", 1, 1, "prepared", "unknown"),
        # attempt 2: a re-claim is logged, then what reconciling found and settled
        ("effect_claimed", 2, 2, "unknown", "dispatching"),
        ("effect_settled", 2, 2, "unknown", "succeeded"),
    ]
    assert ours[-1]["via"] == "reconcile"
    assert ours[0]["level"] == "warning"
    assert ours[-1]["level"] == "info"


async def test_a_request_past_its_deadline_is_never_sent(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path, target_url: str,
    ledger: EffectLedger,
) -> None:  # fmt: skip
    note = f"late-{task_queue[-8:]}"
    key = note_effect_key(_args(note))
    script = publish_note_script(tmp_path, _args(note))
    # The first send fails outright; Temporal's retry comes 1 s later, after the deadline.
    arm_fault(target_url, mode="error_5xx", times=1, key_prefix=key, method="POST")
    policy = {"publish_note": ToolPolicy(effect_class=EffectClass.WRITE, send_within_s=0.8)}
    run = spec(f"scripted:{script}", agent="notes-writer", policy=policy)
    async with running_worker(client, task_queue, migrated_database, targets=_targets(target_url)):
        result = await (await start(client, run, task_queue)).result()
    assert result.status is RunStatus.COMPLETED  # the model is told; the run goes on
    assert (result.final_output or "").startswith("error (failed): not sent: its deadline"), (
        result.final_output
    )
    assert target_commits(target_url, key) == 0
    record = await ledger.get(key)
    assert record is not None
    assert record.status is EffectStatus.FAILED
    assert record.attempt == 2  # the retry claimed it, found the deadline gone, sent nothing
    assert "passed; not sent" in (record.last_error or "")
