"""`groundwork input submit` and `groundwork run events --follow` go through the trigger
service's HTTP API: a real uvicorn process on real Postgres and real Temporal."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pytest
from temporalio.client import Client

from contracts.run import RunState
from contracts.status import RunStatus, WaitingReason
from tests.helpers import ROOT, free_port, running_worker, spec, start, write_script
from tests.integration.test_trigger import (
    TriggerProcess,
    trigger_env,  # noqa: F401  (a fixture this module uses)
)


@pytest.fixture(scope="module")
def service(
    trigger_env: dict[str, str],  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[TriggerProcess]:
    proc = TriggerProcess(trigger_env, free_port(), tmp_path_factory.mktemp("cli") / "trigger.log")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def cli_env(trigger_env: dict[str, str], service: TriggerProcess) -> dict[str, str]:  # noqa: F811
    # Only what the CLI needs: where the service is and a token. No database, no Temporal.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDWORK_")}
    env.update(
        GROUNDWORK_HOME=trigger_env["GROUNDWORK_HOME"],
        GROUNDWORK_TRIGGER_URL=service.url,
        GROUNDWORK_TRIGGER_TOKEN="tok-acme",
    )
    return env


def _cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_input_submit_posts_through_the_service(
    service: TriggerProcess, cli_env: dict[str, str]
) -> None:
    event_id = f"evt-{uuid.uuid4().hex}"
    args = ("input", "submit", "--type", "ticket.updated", "--subject", "ticket-9",
            "--data", '{"status": "open"}', "--source-event-id", event_id, "--json")  # fmt: skip
    first = _cli(cli_env, *args)
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert out["status"] == 202
    assert out["duplicate"] is False
    assert out["disposition"] == "PROJECT"  # no rule matches: recorded only
    record = httpx2.get(
        f"{service.url}/v1/inputs/{out['input_id']}",
        headers={"Authorization": "Bearer tok-acme"},
        timeout=30,
    ).json()
    assert record["principal"] == "alice"  # from the token: it went through the service
    assert record["source"] == "cli"
    assert record["data"] == {"status": "open"}
    again = _cli(cli_env, *args)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) | {"status": 0} == out | {"status": 0, "duplicate": True}
    text = _cli(cli_env, *args[:-1])
    assert text.returncode == 0, text.stderr
    assert f"input {out['input_id']} already logged" in text.stdout
    assert "disposition PROJECT: recorded" in text.stdout


@pytest.mark.parametrize(
    ("extra_env", "args", "code", "needle"),
    [
        ({}, ("--data", "[1]"), 2, "--data must be a JSON object"),
        ({}, ("--data", "{nope"), 2, "--data is not JSON"),
        ({}, ("--kind", "gossip"), 2, "422 from the trigger service: kind"),
        ({}, ("--kind", "control"), 2, "controls"),
        ({"GROUNDWORK_TRIGGER_TOKEN": "wrong"}, (), 1, "401 from the trigger service"),
        ({"GROUNDWORK_TRIGGER_URL": "http://127.0.0.1:9"}, (), 1, "cannot reach the trigger service at http://127.0.0.1:9"),
    ],
    ids=["data-not-object", "data-not-json", "bad-kind", "control-kind", "bad-token", "unreachable"],
)  # fmt: skip
def test_input_submit_errors_are_one_line_and_store_nothing(
    cli_env: dict[str, str],
    migrated_database: str,
    extra_env: dict[str, str],
    args: tuple[str, ...],
    code: int,
    needle: str,
) -> None:
    with psycopg.connect(migrated_database) as conn:
        before = conn.execute("SELECT count(*) FROM inputs").fetchone()
    done = _cli(
        {**cli_env, **extra_env}, "input", "submit", "--type", "t.x", "--subject", "s", *args
    )
    assert done.returncode == code, (done.stdout, done.stderr)
    assert needle in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("error: ")
    with psycopg.connect(migrated_database) as conn:
        assert conn.execute("SELECT count(*) FROM inputs").fetchone() == before


def test_a_token_is_required(cli_env: dict[str, str]) -> None:
    env = {k: v for k, v in cli_env.items() if k != "GROUNDWORK_TRIGGER_TOKEN"}
    env["GROUNDWORK_TRIGGER_TOKENS"] = json.dumps(
        {"a": {"tenant": "t", "principal": "p"}, "b": {"tenant": "t", "principal": "q"}}
    )
    done = _cli(env, "input", "submit", "--type", "t.x", "--subject", "s")
    assert done.returncode == 1
    assert "set GROUNDWORK_TRIGGER_TOKEN" in done.stderr


def test_run_events_of_an_unknown_run(cli_env: dict[str, str]) -> None:
    done = _cli(cli_env, "run", "events", "no-such-run")
    assert done.returncode == 2
    assert "404 from the trigger service: no run 'no-such-run'" in done.stderr
    follow = _cli(cli_env, "run", "events", "no-such-run", "--follow")
    assert follow.returncode == 2
    assert "404" in follow.stderr


def _insert_event(database_url: str, run_id: str, kind: str, n: int) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "INSERT INTO run_events (run_id, type, data) VALUES (%s, %s, %s) RETURNING cursor",
            (run_id, kind, json.dumps({"n": n})),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def _read_line(proc: subprocess.Popen[str], within_s: float = 30) -> str:
    assert proc.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), within_s)
    assert line, f"CLI exited rc={proc.poll()}: {proc.stderr.read() if proc.stderr else ''}"
    return line


async def test_follow_survives_a_service_restart_and_submit_wakes_the_run(
    service: TriggerProcess,
    cli_env: dict[str, str],
    trigger_env: dict[str, str],  # noqa: F811
    client: Client,
    migrated_database: str,
    tmp_path: Path,
) -> None:
    subject = f"svc-{uuid.uuid4().hex[:8]}"
    wait = {"name": "wait_for_event", "arguments": {"type": "deploy.finished", "subject": subject, "timeout_s": 600}}  # fmt: skip
    script = write_script(tmp_path, [{"tool_calls": [wait]}, {"text": "got: {{last_tool_output}}"}])
    run = spec(f"scripted:{script}", agent="watcher", tenant="acme")
    task_queue = trigger_env["GROUNDWORK_TASK_QUEUE"]
    async with running_worker(client, task_queue, migrated_database):
        handle = await start(client, run, task_queue)
        for _ in range(400):
            state: RunState = await handle.query("get_state", result_type=RunState)
            if state.status is RunStatus.WAITING:
                break
            await asyncio.sleep(0.05)
        assert state.waiting_reason is WaitingReason.EVENT
        first = await asyncio.to_thread(_insert_event, migrated_database, run.run_id, "Probe", 1)
        follower = await asyncio.to_thread(
            subprocess.Popen,
            [sys.executable, "-m", "cli", "run", "events", run.run_id, "--follow", "--json"],
            cwd=ROOT, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            seen: list[dict[str, Any]] = [json.loads(await _read_line(follower))]
            assert seen[0]["cursor"] == first
            # The service dies under the open stream; an event lands while it is down.
            assert service.process is not None
            os.killpg(service.process.pid, signal.SIGKILL)
            service.process.wait(10)
            second = await asyncio.to_thread(
                _insert_event, migrated_database, run.run_id, "Probe", 2
            )
            await asyncio.sleep(1.0)  # the CLI is reconnecting to nothing meanwhile
            await asyncio.to_thread(service.start)
            seen.append(json.loads(await _read_line(follower)))
            assert seen[1]["cursor"] == second  # resumed after the first: not sent twice
            submitted = await asyncio.to_thread(
                _cli, cli_env, "input", "submit", "--type", "deploy.finished",
                "--subject", subject, "--data", '{"version": "1.4.2"}',
            )  # fmt: skip
            assert submitted.returncode == 0, submitted.stderr
            assert f"disposition RESUME: delivered to 1 run(s) ({run.run_id})" in submitted.stdout
            result = await handle.result()
            rest, err = await asyncio.to_thread(follower.communicate, timeout=30)
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()
    assert follower.returncode == 0, err
    assert rest == ""  # nothing after the two probes: the run ended, the stream said `end`
    assert [e["data"]["n"] for e in seen] == [1, 2]
    assert result.final_output is not None
    assert json.loads(result.final_output.removeprefix("got: "))["data"] == {"version": "1.4.2"}
    page = await asyncio.to_thread(
        _cli, cli_env, "run", "events", run.run_id, "--after", str(first)
    )
    assert page.returncode == 0, page.stderr
    lines = page.stdout.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].split()[0] == str(second)
    assert "Probe" in lines[0]
