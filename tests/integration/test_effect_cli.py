"""`groundwork effect list | show | resolve` against the real ledger and a real run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from definitions.notes_writer import note_effect_key
from tests.helpers import ROOT, running_worker, spec, start, write_script


def gw(
    temporal_env: WorkflowEnvironment, database_url: str, *args: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDWORK_")}
    env.update(
        GROUNDWORK_TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
        GROUNDWORK_DATABASE_URL=database_url,
        COLUMNS="250",
    )
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_effect_list_and_show(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, migrated_database: str,
    tmp_path: Path, target_url: str,
) -> None:  # fmt: skip
    arguments = {"note_id": f"cli-{task_queue[-8:]}", "revision": 3, "content": "hello"}
    key = note_effect_key(arguments)
    script = write_script(
        tmp_path,
        [{"tool_calls": [{"name": "publish_note", "arguments": arguments}]}, {"text": "done"}],
    )
    run = spec(f"scripted:{script}", agent="notes-writer")
    targets = {"notes": {"kind": "http", "base_url": target_url}}
    async with running_worker(client, task_queue, migrated_database, targets=targets):
        await (await start(client, run, task_queue)).result()

    listed = gw(temporal_env, migrated_database, "effect", "list", "--run", run.run_id, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["effect_key"], r["status"]) for r in rows] == [(key, "succeeded")]

    shown = gw(temporal_env, migrated_database, "effect", "show", key, "--json")
    assert shown.returncode == 0, shown.stderr
    body = json.loads(shown.stdout)
    assert body["external_ref"]
    assert [a["phase"] for a in body["attempts"]] == ["claim", "settle"]

    table = gw(temporal_env, migrated_database, "effect", "list", "--status", "succeeded")
    assert table.returncode == 0
    assert key[:20] in table.stdout


def test_effect_commands_refuse_bad_input(
    temporal_env: WorkflowEnvironment, migrated_database: str
) -> None:
    missing = gw(temporal_env, migrated_database, "effect", "show", "no-such-key")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "error: no effect 'no-such-key'"
    both = gw(
        temporal_env, migrated_database, "effect", "resolve", "r", "k", "--committed", "--abandon"
    )
    assert both.returncode == 2
    assert "exactly one of" in both.stderr
    no_ref = gw(temporal_env, migrated_database, "effect", "resolve", "r", "k", "--committed")
    assert no_ref.returncode == 2
    assert "--committed needs --ref" in no_ref.stderr
    bad_status = gw(temporal_env, migrated_database, "effect", "list", "--status", "done")
    assert bad_status.returncode == 2
