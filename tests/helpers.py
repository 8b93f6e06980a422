"""Test helpers: a worker on a fresh task queue, scripts written to temp files, run starters."""

from __future__ import annotations

import asyncio
import json
import os
import random
import select
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from contracts.run import Budgets, Release, RunResult, RunSpec, RunState
from workers.run_client import start_run
from workers.settings import Settings
from workers.worker import build_worker, worker_deps

_PORTS_HANDED_OUT: set[int] = set()


def cli_env(**overrides: str) -> dict[str, str]:
    """The environment for a `python -m cli` subprocess of a test: none of the developer's
    GROUNDWORK_* or COLUMNS, and an empty GROUNDWORK_HOME of its own, so what `make demo`
    or `groundwork up` left in the checkout's .groundwork (its local.json names an approver
    and a default principal) cannot change what a command does."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("GROUNDWORK_") and k != "COLUMNS"
    }
    env["GROUNDWORK_HOME"] = tempfile.mkdtemp(prefix="gw-cli-home-")
    env.update(overrides)
    return env


def free_port() -> int:
    """A port for a server a test starts, chosen below the kernel's ephemeral range.

    A port from binding port 0 comes from the ephemeral range (32768-60999 here) and is
    released before our server binds it; in that gap the Temporal dev server's own
    internal listeners (also bound to port 0) can take it, which once failed
    `groundwork up` in CI with "address already in use" on the UI port. Ports from
    20000-32767 are never handed out by the kernel for port 0, and the set keeps one
    test process from handing the same port out twice.
    """
    for _ in range(200):
        port = random.randint(20000, 32700)
        if port in _PORTS_HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PORTS_HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free port found in 20000-32700")


def write_script(tmp_path: Path, turns: list[dict[str, Any]], repeat_last: bool = False) -> Path:
    path = tmp_path / f"script-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps({"turns": turns, "repeat_last": repeat_last}))
    return path


def arm_fault(target_url: str, **fault: Any) -> None:
    """Arm a fault of the HTTP target service (POST /faults), e.g. mode="hang"."""
    httpx2.post(f"{target_url}/faults", json=fault, timeout=5).raise_for_status()


def target_commits(target_url: str, key: str) -> int:
    """Commits the HTTP target service itself counts for an idempotency key (GET /stats)."""
    return int(httpx2.get(f"{target_url}/stats", timeout=5).json()["commits"].get(key, 0))


def publish_note_script(tmp_path: Path, arguments: dict[str, Any]) -> Path:
    """A scripted model that calls notes-writer's publish_note once with `arguments`, then
    answers with the tool's output (so the run's result says what the gateway said)."""
    return write_script(
        tmp_path,
        [
            {"tool_calls": [{"name": "publish_note", "arguments": arguments}]},
            {"text": "{{last_tool_output}}"},
        ],
    )


@asynccontextmanager
async def running_worker(
    client: Client, task_queue: str, database_url: str, **settings: Any
) -> AsyncIterator[Worker]:
    config = Settings(task_queue=task_queue, **settings)
    async with (
        worker_deps(config, database_url) as deps,
        build_worker(client, task_queue, deps, config) as worker,
    ):
        yield worker


def spec(
    route: str,
    *,
    agent: str = "source-reader",
    text: str = "Where is RetryPolicy defined?",
    budgets: Budgets | None = None,
    **extra: Any,
) -> RunSpec:
    return RunSpec(
        run_id=f"t-{uuid.uuid4().hex[:12]}",
        release=Release(agent=agent, model_route=route),
        input=text,
        budgets=budgets or Budgets(),
        **extra,
    )


async def start(client: Client, run: RunSpec, task_queue: str) -> WorkflowHandle[Any, RunResult]:
    return await start_run(client, run, task_queue)


async def state_until(
    handle: WorkflowHandle[Any, Any], check: Callable[[RunState], bool], attempts: int = 600
) -> RunState:
    """Poll the run's `get_state` (every 50 ms) until `check` holds."""
    for _ in range(attempts):
        state: RunState = await handle.query("get_state", result_type=RunState)
        if check(state):
            return state
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {handle.id} did not reach the expected state")


ROOT = Path(__file__).parents[1]


def replayer() -> Any:
    """A Replayer with every workflow the worker serves, configured as the worker is."""
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.worker import Replayer

    from workers.worker import prepare_agents_sdk, sandbox_runner
    from workflows.agent_run import AgentRunWorkflow
    from workflows.research import ResearchWorkflow
    from workflows.session import SessionWorkflow

    prepare_agents_sdk()
    return Replayer(
        workflows=[AgentRunWorkflow, SessionWorkflow, ResearchWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )


def spawn_worker(
    temporal_address: str, database_url: str, task_queue: str, log: Path, **env: str
) -> subprocess.Popen[bytes]:
    """`groundwork worker` as a real process in its own session (so it can be SIGKILLed)."""
    environment = dict(os.environ)
    environment.update(
        GROUNDWORK_TEMPORAL_ADDRESS=temporal_address,
        GROUNDWORK_DATABASE_URL=database_url,
        GROUNDWORK_TASK_QUEUE=task_queue,
        **env,
    )
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cli", "worker"],
            cwd=ROOT,
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_worker(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


@contextmanager
def target_service(db: Path) -> Iterator[str]:
    """Start `python -m adapters.targets.http_service --port 0`, yield its URL, stop it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "adapters.targets.http_service", "--port", "0", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        line = proc.stdout.readline() if ready else ""
        if not line.startswith("listening on "):
            proc.kill()
            _, err = proc.communicate(timeout=5)
            raise RuntimeError(f"target service did not start: {line!r} {err}")
        yield line.removeprefix("listening on ").strip()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
