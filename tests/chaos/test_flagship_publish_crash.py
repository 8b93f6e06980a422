"""Seed 000's worst moment: the worker is SIGKILLed after the docs site committed the article
and before the workflow learned of it. The next worker reconciles by effect key: exactly
one tag at the destination, one PublishConfirmed, and the run still verifies."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from adapters.ledger import EffectLedger
from adapters.targets.git_repo import git_env, init_repo
from contracts.effects import EffectStatus
from contracts.run import ActivityTimeouts
from contracts.status import RunStatus
from tests.helpers import spawn_worker, stop_worker
from tests.integration.test_research import (
    APPROVERS,
    decide,
    decision_for,
    research_spec,
    state_of,
    wait_for,
)
from workers.research_client import start_research


async def test_sigkill_after_publish_commit_leaves_one_tag_and_one_publish_confirmed(
    temporal_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    migrated_database: str,
    tmp_path: Path,
) -> None:
    repo = init_repo(tmp_path / "docs-site")
    env = {
        "GROUNDWORK_TARGETS": json.dumps({"docs-site": {"kind": "git", "path": str(repo)}}),
        "GROUNDWORK_APPROVERS": json.dumps(APPROVERS),
        "GROUNDWORK_CRASH_AT": "after_target_commit",
        "GROUNDWORK_CRASH_MARKER": str(tmp_path / "crashed"),
        "GROUNDWORK_STICKY_TIMEOUT_S": "1",
    }
    address = temporal_env.client.service_client.config.target_host
    spec = research_spec(timeouts=ActivityTimeouts(heartbeat_s=1.0, tool_call_s=10))
    first = spawn_worker(address, migrated_database, task_queue, tmp_path / "w1.log", **env)
    try:
        handle = await start_research(client, spec, task_queue)
        state = await wait_for(handle, lambda s: s.pending_approval is not None)
        assert (await decide(handle, decision_for(state))).accepted
        for _ in range(600):
            if first.poll() is not None:
                break
            await asyncio.sleep(0.05)
        assert first.returncode == -9, f"worker was not killed: {first.returncode}"
        tags_at_kill = _tags(repo)
        assert len(tags_at_kill) == 1  # the target had committed when the worker died
        assert not (await handle.describe()).close_time
        second = spawn_worker(address, migrated_database, task_queue, tmp_path / "w2.log", **env)
        try:
            result = await asyncio.wait_for(handle.result(), timeout=90)
            final = await state_of(handle)
        finally:
            stop_worker(second)
    finally:
        stop_worker(first)
    assert result.status is RunStatus.COMPLETED
    assert final.verification is not None
    assert final.verification.verified
    assert _tags(repo) == tags_at_kill
    commits = subprocess.run(
        ["git", "-C", str(repo), "log", "--format=%H", "--", "articles/"],
        capture_output=True, text=True, env=git_env(), check=True,
    ).stdout.split()  # fmt: skip
    assert len(commits) == 1
    async with AsyncConnectionPool(
        migrated_database, min_size=1, max_size=1, kwargs={"autocommit": True}
    ) as pool:
        ledger = EffectLedger(pool)
        events = await ledger.events(spec.run_id)
        confirmed = [e for e in events if e["type"] == "PublishConfirmed"]
        assert len(confirmed) == 1
        record = await ledger.get(confirmed[0]["effect_key"])
        attempts = await ledger.attempts(confirmed[0]["effect_key"])
    assert record is not None
    assert record.status is EffectStatus.SUCCEEDED
    assert record.attempt == 2  # the second attempt reconciled; it sent nothing
    assert [a.phase for a in attempts] == ["claim", "claim", "settle"]  # no second send
    # The second claim found the first one's intent (dispatching), so it reconciled by key.
    assert attempts[1].detail == {"previous": "dispatching"}
    assert record.external_ref is not None
    assert record.external_ref.startswith(tags_at_kill[0] + "@")


def _tags(repo: Path) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(repo), "tag", "-l", "gw/*"],
        capture_output=True, text=True, env=git_env(), check=True,
    )  # fmt: skip
    return out.stdout.split()
