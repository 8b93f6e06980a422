"""Approvals bound to exactly what is approved, verified where the secrets are."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from contracts.approvals import ApprovalDecision, ApprovalRequest, DecisionResult, Verdict, sign
from contracts.run import RunState
from contracts.status import RunStatus, WaitingReason
from definitions.notes_writer import note_effect_key
from tests.helpers import running_worker, spec, start, target_commits, write_script
from workers.eviction import cached_runs

EDITOR_SECRET = "editor-secret-do-not-log-7f3a"
APPROVERS = {
    "alice": {"secret": EDITOR_SECRET, "roles": ["editor"]},
    "mallory": {"secret": "mallory-secret", "roles": ["viewer"]},
}


def decision(request: ApprovalRequest, principal: str = "alice", secret: str = EDITOR_SECRET,
             verdict: Verdict = Verdict.APPROVE, **changes: Any) -> ApprovalDecision:  # fmt: skip
    unsigned = ApprovalDecision(
        approval_id=request.approval_id, verdict=verdict, principal=principal, subject=request.subject,
        revision=request.revision, content_hash=request.content_hash, destination=request.destination,
        scope=request.scope,
    ).model_copy(update=changes)  # fmt: skip
    return unsigned.model_copy(update={"signature": sign(unsigned, secret)})


async def _pending(handle: WorkflowHandle[Any, Any]) -> ApprovalRequest:
    for _ in range(400):
        state: RunState = await handle.query("get_state", result_type=RunState)
        if state.status is RunStatus.WAITING and state.pending_approval is not None:
            assert state.waiting_reason is WaitingReason.APPROVAL
            return state.pending_approval
        await asyncio.sleep(0.05)
    raise AssertionError("run never waited for approval")


async def _run(
    client: Client, task_queue: str, tmp_path: Path, note: str, revision: int = 7
) -> tuple[WorkflowHandle[Any, Any], str]:
    arguments = {
        "note_id": note,
        "revision": revision,
        "content": f"# {note}\n\nrevision {revision}\n",
    }
    script = write_script(
        tmp_path,
        [
            {"tool_calls": [{"name": "publish_reviewed_note", "arguments": arguments}]},
            {"text": "{{last_tool_output}}"},
        ],
    )
    handle = await start(client, spec(f"scripted:{script}", agent="notes-writer"), task_queue)
    return handle, note_effect_key(arguments)


async def test_an_approval_binds_revision_hash_destination_and_approver(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path, target_url: str
) -> None:
    targets = {"notes": {"kind": "http", "base_url": target_url}}
    async with running_worker(
        client, task_queue, migrated_database, targets=targets, approvers=APPROVERS
    ):
        handle, key = await _run(client, task_queue, tmp_path, f"bound-{task_queue[-8:]}")
        request = await _pending(handle)
        assert request.revision == "7"
        assert (
            request.content_hash
            == hashlib.sha256(f"# {request.subject[5:]}\n\nrevision 7\n".encode()).hexdigest()
        )
        refusals = {
            "revision": decision(request, revision="6"),
            "content": decision(request, content_hash="0" * 64),
            "destination": decision(request, destination="elsewhere"),
        }
        for what, bad in refusals.items():
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update("decide_approval", bad, result_type=DecisionResult)
            assert what in str(refused.value.cause), what
        forged = await handle.execute_update(
            "decide_approval", decision(request, secret="guess"), result_type=DecisionResult
        )
        assert not forged.accepted
        assert forged.message == "bad signature"
        unauthorized = await handle.execute_update(
            "decide_approval",
            decision(request, principal="mallory", secret="mallory-secret"),
            result_type=DecisionResult,
        )
        assert not unauthorized.accepted
        assert "lacks a required role" in unauthorized.message
        assert target_commits(target_url, key) == 0  # nothing refused published anything

        good = decision(request)
        first = await handle.execute_update("decide_approval", good, result_type=DecisionResult)
        assert first.accepted
        await handle.signal("approve", good)  # the same decision again is the same decision
        result = await handle.result()
        history = await handle.fetch_history()
    assert result.status is RunStatus.COMPLETED
    assert (result.final_output or "").startswith(f"ok: effect {key} committed")
    assert target_commits(target_url, key) == 1
    assert EDITOR_SECRET not in history.to_json()


async def test_reject_publishes_nothing_and_the_model_is_told(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path, target_url: str
) -> None:
    targets = {"notes": {"kind": "http", "base_url": target_url}}
    async with running_worker(
        client, task_queue, migrated_database, targets=targets, approvers=APPROVERS
    ):
        handle, key = await _run(client, task_queue, tmp_path, f"rejected-{task_queue[-8:]}")
        request = await _pending(handle)
        await handle.signal("reject", decision(request, verdict=Verdict.REJECT, reason="tone"))
        result = await handle.result()
        late = await handle.query("get_state", result_type=RunState)
    assert (result.final_output or "").startswith("rejected by alice: tone")
    assert target_commits(target_url, key) == 0
    assert late.pending_approval is None


async def test_cli_approve_shows_what_is_approved_and_signs_it(
    temporal_env: Any,
    client: Client,
    task_queue: str,
    migrated_database: str,
    tmp_path: Path,
    target_url: str,
) -> None:
    import json
    import subprocess
    import sys

    from tests.helpers import ROOT, cli_env

    env = cli_env(
        GROUNDWORK_TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
        GROUNDWORK_DATABASE_URL=migrated_database,
        GROUNDWORK_APPROVERS=json.dumps(APPROVERS),
    )

    async def gw(*args: str) -> subprocess.CompletedProcess[str]:
        # In a thread: the worker answering the CLI's query runs on this event loop.
        return await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "cli", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    targets = {"notes": {"kind": "http", "base_url": target_url}}
    async with running_worker(
        client, task_queue, migrated_database, targets=targets, approvers=APPROVERS
    ):
        handle, key = await _run(client, task_queue, tmp_path, f"cli-{task_queue[-8:]}")
        request = await _pending(handle)
        run_id = handle.id.removeprefix("run-")
        nobody = await gw("approve", run_id, "--yes")
        assert nobody.returncode == 2
        assert "--as PRINCIPAL" in nobody.stderr
        wrong = await gw("approve", run_id, "--approval", "not-it", "--as", "alice", "--yes")
        assert wrong.returncode == 1
        assert request.approval_id in wrong.stderr
        approved = await gw("approve", run_id, "--as", "alice", "--yes")
        assert approved.returncode == 0, approved.stderr
        for shown in (
            request.subject,
            request.revision,
            request.content_hash,
            request.destination,
            "revision 7",
        ):
            assert shown in approved.stdout
        assert "approved by alice" in approved.stdout
        result = await handle.result()
        listed = await gw("approval", "list", "--run", run_id, "--json")
    assert result.status is RunStatus.COMPLETED
    assert target_commits(target_url, key) == 1
    rows = json.loads(listed.stdout)
    assert [(r["status"], r["decided_by"]) for r in rows] == [("approved", "alice")]


async def test_cancel_while_waiting_for_approval_ends_cancelled(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path, target_url: str
) -> None:
    from temporalio.client import WorkflowFailureError

    targets = {"notes": {"kind": "http", "base_url": target_url}}
    async with running_worker(
        client, task_queue, migrated_database, targets=targets, approvers=APPROVERS
    ):
        handle, key = await _run(client, task_queue, tmp_path, f"cancelled-{task_queue[-8:]}")
        request = await _pending(handle)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        state = await handle.query("get_state", result_type=RunState)
    assert state.status is RunStatus.CANCELLED
    assert request.approval_id
    assert target_commits(target_url, key) == 0


def test_a_decision_for_an_old_revision_names_the_current_one() -> None:
    from datetime import UTC, datetime

    from contracts.approvals import binding_mismatch

    now = datetime.now(UTC)
    current = ApprovalRequest(
        approval_id="a8", run_id="r", subject="article-42", revision="8", content_hash="h8",
        destination="docs-site", scope="publish", effect_key="k", requested_at=now, expires_at=now,
    )  # fmt: skip
    old = ApprovalDecision(
        approval_id="a7", verdict=Verdict.APPROVE, principal="alice", subject="article-42", revision="7",
        content_hash="h7", destination="docs-site", scope="publish",
    )  # fmt: skip
    assert binding_mismatch(current, old) == "revision 7 is superseded: the current revision is 8"


async def test_worker_down_while_the_approval_arrives(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path, target_url: str
) -> None:
    targets = {"notes": {"kind": "http", "base_url": target_url}}
    async with running_worker(
        client, task_queue, migrated_database, targets=targets, approvers=APPROVERS
    ) as worker:
        handle, key = await _run(client, task_queue, tmp_path, f"down-{task_queue[-8:]}")
        request = await _pending(handle)
    # The stopped worker tore its idle cached run down in the run's own event loop: nothing of
    # it is left for the garbage collector to close on some other thread or loop.
    assert cached_runs(worker) == {}
    unraisable: list[str] = []
    previous, sys.unraisablehook = (
        sys.unraisablehook,
        lambda u: unraisable.append(repr(u.exc_value)),
    )
    try:
        gc.collect()
    finally:
        sys.unraisablehook = previous
    assert unraisable == []
    await handle.signal("approve", decision(request))  # no worker: Temporal keeps it
    assert target_commits(target_url, key) == 0
    async with running_worker(
        client, task_queue, migrated_database, targets=targets, approvers=APPROVERS
    ):
        result = await handle.result()
    assert result.status is RunStatus.COMPLETED
    assert target_commits(target_url, key) == 1


async def test_a_new_revision_supersedes_the_pending_approval(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path, target_url: str
) -> None:
    note = f"super-{task_queue[-8:]}"
    r7 = {"note_id": note, "revision": 7, "content": "# r7\n"}
    r8 = {"note_id": note, "revision": 8, "content": "# r8\n"}
    script = write_script(
        tmp_path,
        [
            {"tool_calls": [{"name": "publish_reviewed_note", "arguments": r7},
                            {"name": "publish_reviewed_note", "arguments": r8}]},
            {"text": "{{tool_output:0}}\\n{{tool_output:1}}"},
        ],
    )  # fmt: skip
    targets = {"notes": {"kind": "http", "base_url": target_url}}
    async with running_worker(
        client, task_queue, migrated_database, targets=targets, approvers=APPROVERS
    ):
        handle = await start(client, spec(f"scripted:{script}", agent="notes-writer"), task_queue)
        pending = await _pending(handle)
        for _ in range(100):  # the r7 request is superseded as soon as the r8 call arrives
            if pending.revision == "8":
                break
            await asyncio.sleep(0.05)
            pending = await _pending(handle)
        assert pending.revision == "8"
        stale = decision(pending, revision="7", content_hash=hashlib.sha256(b"# r7\n").hexdigest())
        with pytest.raises(WorkflowUpdateFailedError) as old:
            await handle.execute_update("decide_approval", stale, result_type=DecisionResult)
        assert "the current revision is 8" in str(old.value.cause)
        await handle.execute_update(
            "decide_approval", decision(pending), result_type=DecisionResult
        )
        result = await handle.result()
    lines = (result.final_output or "").split("\\n")
    assert lines[0].startswith("rejected by groundwork: superseded by revision 8"), lines
    assert lines[1].startswith("ok: effect"), lines
    assert target_commits(target_url, note_effect_key(r7)) == 0
    assert target_commits(target_url, note_effect_key(r8)) == 1


async def test_revoke_withdraws_a_pending_approval(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path, target_url: str
) -> None:
    from contracts.approvals import RevokeApprovalInput

    targets = {"notes": {"kind": "http", "base_url": target_url}}
    async with running_worker(
        client, task_queue, migrated_database, targets=targets, approvers=APPROVERS
    ):
        handle, key = await _run(client, task_queue, tmp_path, f"revoked-{task_queue[-8:]}")
        request = await _pending(handle)
        await handle.signal(
            "revoke",
            RevokeApprovalInput(
                approval_id=request.approval_id, principal="bob", reason="legal hold"
            ),
        )
        result = await handle.result()
    assert (result.final_output or "").startswith("rejected by bob: legal hold")
    assert target_commits(target_url, key) == 0
