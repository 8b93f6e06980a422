"""The five crash windows of seed 001 §5.4, each by SIGKILL of a real worker process at an
injected point, against each of the three real targets. Effects are counted at the target.

before_intent        killed before the effect row is claimed
after_intent         claimed (dispatching, committed to Postgres), nothing sent
after_send           request on the wire, response not read (HTTP: the service holds the
                     request 1 s, so it commits after the worker is dead)
after_target_commit  the target committed and answered; the ledger is not settled
after_settle         the ledger is settled; Temporal never got the activity's result
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from activities._faults import CRASH_POINTS
from adapters.targets.git_repo import git_env, init_repo
from contracts.effects import EffectStatus
from contracts.run import ActivityTimeouts
from contracts.status import RunStatus
from definitions.notes_writer import note_effect_key
from tests.chaos.evidence import ledger_state
from tests.helpers import (
    arm_fault,
    publish_note_script,
    spawn_worker,
    spec,
    start,
    stop_worker,
    target_commits,
)

TARGET_KINDS = ("http", "git", "directory")


def _target_config(kind: str, tmp_path: Path, service_url: str) -> dict[str, Any]:
    if kind == "http":
        return {"kind": "http", "base_url": service_url, "timeout_s": 5}
    if kind == "git":
        repo = tmp_path / "docs-site"
        init_repo(repo)
        return {"kind": "git", "path": str(repo)}
    return {"kind": "directory", "path": str(tmp_path / "outbox")}


def _effects_at_target(kind: str, config: dict[str, Any], service_url: str, key: str) -> int:
    if kind == "http":
        return target_commits(service_url, key)
    if kind == "git":
        tags = subprocess.run(
            ["git", "-C", config["path"], "tag", "-l", "gw/*"], capture_output=True, text=True, env=git_env(), check=True
        ).stdout.split()  # fmt: skip
        log = subprocess.run(
            ["git", "-C", config["path"], "log", "--format=%s", "--", "notes/"], capture_output=True, text=True,
            env=git_env(), check=True,
        ).stdout.splitlines()  # fmt: skip
        assert len(log) == len(tags), (log, tags)
        return len(tags)
    manifests = Path(config["path"]) / ".effects"
    return len(list(manifests.glob("*.json"))) if manifests.exists() else 0


@pytest.mark.parametrize("kind", TARGET_KINDS)
@pytest.mark.parametrize("point", CRASH_POINTS)
async def test_crash_window_leaves_exactly_one_effect(
    temporal_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    migrated_database: str,
    tmp_path: Path,
    target_url: str,
    point: str,
    kind: str,
) -> None:
    note_id = f"n-{hashlib.sha256(task_queue.encode()).hexdigest()[:10]}"
    arguments = {
        "note_id": note_id,
        "revision": 7,
        "content": f"# {note_id}\n\nrevision 7 of {point}/{kind}\n",
    }
    key = note_effect_key(arguments)
    script = publish_note_script(tmp_path, arguments)
    config = _target_config(kind, tmp_path, target_url)
    if kind == "http" and point == "after_send":
        fault = {"mode": "hang", "hang_s": 1.0, "times": 1, "key_prefix": key, "method": "POST"}
        arm_fault(target_url, **fault)
    env = {
        "GROUNDWORK_TARGETS": json.dumps({"notes": config}),
        "GROUNDWORK_CRASH_AT": point,
        "GROUNDWORK_CRASH_MARKER": str(tmp_path / "crashed"),
        "GROUNDWORK_STICKY_TIMEOUT_S": "1",
    }
    address = temporal_env.client.service_client.config.target_host
    run = spec(
        f"scripted:{script}",
        agent="notes-writer",
        timeouts=ActivityTimeouts(heartbeat_s=1.0, tool_call_s=10),
    )
    first = spawn_worker(address, migrated_database, task_queue, tmp_path / "w1.log", **env)
    try:
        handle = await start(client, run, task_queue)
        for _ in range(600):
            if first.poll() is not None:
                break
            await asyncio.sleep(0.05)
        assert first.returncode == -9, f"worker was not killed at {point}: {first.returncode}"
        assert (tmp_path / "crashed").read_text() == point
        second = spawn_worker(address, migrated_database, task_queue, tmp_path / "w2.log", **env)
        try:
            result = await asyncio.wait_for(handle.result(), timeout=60)
        finally:
            stop_worker(second)
    finally:
        stop_worker(first)
    assert result.status is RunStatus.COMPLETED
    assert result.final_output is not None
    assert result.final_output.startswith(f"ok: effect {key} committed"), result.final_output
    assert _effects_at_target(kind, config, target_url, key) == 1
    record, events = await ledger_state(migrated_database, key, run.run_id)
    assert record is not None
    assert record.status is EffectStatus.SUCCEEDED
    assert record.external_ref
    assert [e["type"] for e in events] == ["NotePublished"]
