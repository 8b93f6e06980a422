"""`groundwork effect list | show | resolve` against the real ledger and a real run."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx2
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from adapters.ledger import EffectLedger
from contracts.effects import EffectStatus
from contracts.run import ActivityTimeouts, RunState
from contracts.status import RunStatus, WaitingReason
from definitions.notes_writer import note_effect_key
from tests.helpers import (
    ROOT,
    arm_fault,
    cli_env,
    running_worker,
    spec,
    start,
    target_commits,
    write_script,
)


def gw(
    temporal_env: WorkflowEnvironment, database_url: str, *args: str, columns: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = cli_env(
        GROUNDWORK_TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
        GROUNDWORK_DATABASE_URL=database_url,
    )
    if columns is not None:
        env["COLUMNS"] = columns
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

    # Piped (stdout is not a terminal), the table is not cut to 80 columns: the key is whole
    # on its line, ready to paste into `effect show`.
    table = gw(temporal_env, migrated_database, "effect", "list", "--status", "succeeded")
    assert table.returncode == 0
    assert any(key in line and "succeeded" in line for line in table.stdout.splitlines())
    # However narrow the terminal, cells wrap; nothing ends in an ellipsis.
    narrow = gw(
        temporal_env, migrated_database, "effect", "list", "--run", run.run_id, columns="60"
    )
    assert narrow.returncode == 0
    assert "\u2026" not in narrow.stdout
    assert key[:4] in narrow.stdout


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


async def test_effect_resolve_answers_once_recorded_refuses_a_key_the_run_does_not_wait_on_and_takes_a_repeat(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, migrated_database: str,
    tmp_path: Path, target_url: str, ledger: EffectLedger,
) -> None:  # fmt: skip
    prefix = f"res-{task_queue[-8:]}"
    first = {"note_id": f"{prefix}-a", "revision": 1, "content": "lost"}
    second = {"note_id": f"{prefix}-b", "revision": 1, "content": "lost too"}
    key, key_b = note_effect_key(first), note_effect_key(second)
    script = write_script(
        tmp_path,
        [
            {"tool_calls": [{"name": "publish_note", "arguments": first}]},
            {"tool_calls": [{"name": "publish_note", "arguments": second}]},
            {"text": "{{tool_output:0}}\n{{tool_output:1}}"},
        ],
    )
    # Each send is lost before the commit and the target cannot answer lookups: nobody knows.
    arm_fault(
        target_url, mode="drop_before_commit", times=2, key_prefix=f"note-{prefix}-", method="POST"
    )
    arm_fault(target_url, mode="lookup_unknown", times=-1, key_prefix=f"note-{prefix}-")
    run = spec(f"scripted:{script}", agent="notes-writer", timeouts=ActivityTimeouts(tool_call_s=5))
    targets = {"notes": {"kind": "http", "base_url": target_url, "timeout_s": 3}}

    def resolve(*args: str) -> subprocess.CompletedProcess[str]:
        return gw(temporal_env, migrated_database, "effect", "resolve", run.run_id, *args)

    async def waiting_on(effect_key: str) -> None:
        for _ in range(400):
            state = await handle.query("get_state", result_type=RunState)
            if state.waiting_reason is WaitingReason.EFFECT_UNKNOWN:
                record = await ledger.get(effect_key)
                if record is not None and record.status is EffectStatus.REQUIRES_HUMAN:
                    return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the run never waited for a human on {effect_key}")

    try:
        async with running_worker(client, task_queue, migrated_database, targets=targets):
            handle = await start(client, run, task_queue)
            await waiting_on(key)

            wrong = await asyncio.to_thread(resolve, f"{key}-typo", "--not-committed")
            assert wrong.returncode == 1, wrong.stderr
            assert wrong.stderr.strip().startswith(
                f"error: refused: this run is not waiting on effect '{key}-typo' (waiting on: {key})"
            ), wrong.stderr
            assert len(wrong.stderr.strip().splitlines()) == 1
            record = await ledger.get(key)
            assert record is not None
            assert record.status is EffectStatus.REQUIRES_HUMAN  # the refusal changed nothing

            answered = await asyncio.to_thread(resolve, key, "--committed", "--ref", "manual-7")
            assert answered.returncode == 0, answered.stderr
            assert "ledger succeeded" in answered.stdout
            # Returned only after the ledger recorded it:
            record = await ledger.get(key)
            assert record is not None
            assert record.status is EffectStatus.SUCCEEDED
            assert record.external_ref == "manual-7"

            # The run goes on and waits on the second note. A client that lost the first
            # answer's response sends it again: the same answer, taken as the one it was.
            await waiting_on(key_b)
            repeated = await asyncio.to_thread(resolve, key, "--committed", "--ref", "manual-7")
            assert repeated.returncode == 0, repeated.stderr
            assert "ledger succeeded" in repeated.stdout
            # A different answer for an effect already answered is refused.
            changed = await asyncio.to_thread(resolve, key, "--not-committed")
            assert changed.returncode == 1, changed.stderr
            assert "is not waiting on effect" in changed.stderr

            last = await asyncio.to_thread(resolve, key_b, "--committed", "--ref", "manual-8")
            assert last.returncode == 0, last.stderr
            result = await handle.result()
    finally:
        httpx2.delete(f"{target_url}/faults", timeout=5).raise_for_status()
    assert result.status is RunStatus.COMPLETED
    assert target_commits(target_url, key) == 0
    assert target_commits(target_url, key_b) == 0
    attempts = [a.phase for a in await ledger.attempts(key)]
    assert attempts.count("resolve") == 1  # the repeat was one answer, recorded once
    # After the run ended: the answer the ledger holds is recognised (a client retrying after
    # a lost response, while the run went on and completed); any other answer is refused with
    # what the ledger holds; a run that does not exist is named as such. None writes anything.
    repeat = await asyncio.to_thread(resolve, key_b, "--committed", "--ref", "manual-8")
    assert repeat.returncode == 0, repeat.stderr
    assert repeat.stdout.strip() == (
        f"effect {key_b} was already resolved committed by cli: ledger succeeded; "
        f"run {run.run_id} has ended since"
    )
    again = await asyncio.to_thread(resolve, key, "--abandon")
    assert again.returncode == 1, again.stderr
    assert again.stderr.strip() == (
        f"error: refused: run {run.run_id} has ended; effect {key} was resolved committed by "
        "cli (ledger succeeded); nothing was changed"
    )
    no_run = await asyncio.to_thread(
        gw, temporal_env, migrated_database, "effect", "resolve", "no-such-run", key, "--abandon"
    )
    assert no_run.returncode == 1
    assert no_run.stderr.startswith("error: no run 'no-such-run'")
    for effect_key in (key, key_b):
        attempts = [a.phase for a in await ledger.attempts(effect_key)]
        assert attempts.count("resolve") == 1
