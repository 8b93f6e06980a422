"""The `groundwork` command as a user runs it: real processes, real embedded stack."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from temporalio.testing import WorkflowEnvironment

from tests.helpers import free_port

ROOT = Path(__file__).parents[2]
GROUNDWORK = [sys.executable, "-m", "cli"]


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDWORK_")}
    env.update(
        GROUNDWORK_HOME=str(home),
        GROUNDWORK_TEMPORAL_PORT=str(free_port()),
        GROUNDWORK_UI_PORT=str(free_port()),
        GROUNDWORK_TRIGGER_PORT=str(free_port()),
        GROUNDWORK_TASK_QUEUE=f"cli-{home.name}",
        COLUMNS="200",
    )
    env.update(extra)
    return env


def gw(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GROUNDWORK, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_bad_input_is_one_line_and_a_nonzero_exit(tmp_path: Path) -> None:
    env = _env(tmp_path / "gw")
    bad_route = gw(
        env, "run", "start", "--agent", "source-reader", "--input", "q", "--model", "bogus:x"
    )
    assert bad_route.returncode == 2
    assert bad_route.stderr.strip().startswith("error: invalid release.model_route")
    assert len(bad_route.stderr.strip().splitlines()) == 1
    for args in (["--packages", "no_such_package_here"], ["--git", str(tmp_path)]):
        bad_source = gw(env, "demo", *args)
        assert bad_source.returncode == 2, bad_source.stderr
        assert len(bad_source.stderr.strip().splitlines()) == 1, bad_source.stderr
        assert bad_source.stderr.startswith("error: ")
    no_stack = gw(env, "run", "show", "anything")
    assert no_stack.returncode == 1
    assert "groundwork up --detach" in no_stack.stderr
    assert not (tmp_path / "gw" / "stack.json").exists()


def test_taken_port_names_the_port_and_the_variable(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = _env(tmp_path / "gw", GROUNDWORK_TEMPORAL_PORT=str(port))
        result = gw(env, "up", "--detach")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(port) in lines[0]
    assert "GROUNDWORK_TEMPORAL_PORT" in lines[0]
    assert not (tmp_path / "gw" / "stack.json").exists()


def test_embedded_stack_up_run_show_down(tmp_path: Path) -> None:
    home = tmp_path / "gw"
    env = _env(home)
    try:
        up = gw(env, "up", "--detach")
        assert up.returncode == 0, up.stderr
        state = json.loads((home / "stack.json").read_text())
        again = gw(env, "up", "--detach")
        assert again.returncode == 0
        assert "already running" in again.stdout
        assert json.loads((home / "stack.json").read_text()) == state

        started = gw(
            env,
            "run",
            "start",
            "--agent",
            "source-reader",
            "--input",
            "Where is RetryPolicy?",
            "--run-id",
            "cli-1",
        )
        assert started.returncode == 0, started.stderr
        assert "RunCompleted" in started.stdout
        assert "common.py:" in started.stdout
        assert "/namespaces/default/workflows/run-cli-1" in started.stdout

        shown = gw(env, "run", "show", "cli-1", "--json")
        assert shown.returncode == 0, shown.stderr
        body = json.loads(shown.stdout)
        assert body["state"]["status"] == "Completed"
        assert body["state"]["usage"]["tool_calls"] == 2

        temporal = Path(sys.executable).parent / "temporal"
        listed = subprocess.run(
            [str(temporal), "workflow", "list", "--address", state["temporal_address"], "--query", 'GwStatus="Completed"', "-o", "json"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert "run-cli-1" in listed.stdout, listed.stderr
    finally:
        down = gw(env, "down")
    assert down.returncode == 0, down.stderr
    assert not (home / "stack.json").exists()
    for key in ("temporal_pid", "worker_pid", "postgres_pid", "trigger_pid"):
        pid = state[key]
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, (
            key
        )


def test_external_servers_start_nothing_embedded(
    tmp_path: Path, temporal_env: WorkflowEnvironment, migrated_database: str
) -> None:
    home = tmp_path / "gw"
    env = _env(
        home,
        GROUNDWORK_TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
        GROUNDWORK_DATABASE_URL=migrated_database,
    )
    try:
        up = gw(env, "up", "--detach")
        assert up.returncode == 0, up.stderr
        state = json.loads((home / "stack.json").read_text())
        assert state["temporal_pid"] is None
        assert state["postgres_pid"] is None
        assert not (home / "pgdata").exists()
        assert not (home / "temporal.db").exists()
        started = gw(
            env,
            "run",
            "start",
            "--agent",
            "source-reader",
            "--input",
            "q",
            "--run-id",
            f"ext-{home.parent.name}",
        )
        assert started.returncode == 0, started.stderr
        assert "RunCompleted" in started.stdout
    finally:
        down = gw(env, "down")
    assert down.returncode == 0


@pytest.mark.parametrize(
    "args", [["run", "show", "--help"], ["up", "--help"], ["db", "migrate", "--help"]]
)
def test_help_is_available(tmp_path: Path, args: list[str]) -> None:
    assert gw(_env(tmp_path), *args).returncode == 0


def test_foreground_up_stops_everything_on_ctrl_c(tmp_path: Path) -> None:
    import signal
    import time

    home = tmp_path / "gw"
    env = _env(home)
    process = subprocess.Popen(
        [*GROUNDWORK, "up"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not (home / "stack.json").exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "stack did not come up"
            time.sleep(0.2)
        state = json.loads((home / "stack.json").read_text())
        process.send_signal(signal.SIGINT)  # what Ctrl-C sends to the foreground process
        out, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    assert "Stack stopped." in out
    assert not (home / "stack.json").exists()
    for key in ("temporal_pid", "worker_pid", "postgres_pid", "trigger_pid"):
        pid = state[key]
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, (
            key
        )


def test_demo_waits_for_an_approval_from_a_second_terminal_then_publishes_verified(
    tmp_path: Path,
) -> None:
    """`make demo` as a newcomer runs it: the approval comes from `groundwork approve`."""
    home = tmp_path / "gw"
    env = _env(home)
    demo = subprocess.Popen(
        [*GROUNDWORK, "demo"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert demo.stdout is not None
        seen: list[str] = []
        run_id = None
        for line in demo.stdout:
            seen.append(line)
            if "groundwork approve " in line:
                run_id = line.split("groundwork approve ", 1)[1].split()[0]
                break
        assert run_id, "".join(seen)
        output = "".join(seen)
        for repo in ("temporalio", "agents", "psycopg", "pydantic", "structlog"):
            assert f"branch {repo}" in output
        assert "EvidenceSet v1 closed: 5 bundles" in output
        approved = gw(env, "approve", run_id, "--yes")
        assert approved.returncode == 0, approved.stderr
        assert "approved by local-editor" in approved.stdout
        rest, _ = demo.communicate(timeout=120)
        assert demo.returncode == 0, rest
        assert "matches the approved content" in rest
        assert "articles/research-article.md" in rest
        # The same pipeline with --yes: the demo signs as the local editor itself.
        again = gw(env, "demo", "--yes", "--packages", "structlog,psycopg")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "--yes: approved by local-editor" in again.stdout
        shown = gw(env, "run", "show", run_id, "--json")
        assert json.loads(shown.stdout)["state"]["status"] == "Completed"
        tags = subprocess.run(
            ["git", "-C", str(home / "docs-site"), "tag", "-l"], capture_output=True, text=True
        ).stdout.split()
        assert len(tags) == 2
    finally:
        if demo.poll() is None:
            demo.kill()
        gw(env, "down")
