#!/usr/bin/env python
"""Flagship (issue 6): what one whole research run costs on the embedded stack.

One invocation starts its own stack: an embedded PostgreSQL (migrated), a Temporal dev
server (bench/_infra.py) and ONE real worker process (`python -m cli worker` with
GROUNDWORK_TEMPORAL_ADDRESS / DATABASE_URL / TASK_QUEUE / HOME / TARGETS / APPROVERS, as
tests/helpers.py spawn_worker does). The worker gets one git docs-site target per rep
(`docs-site-r<n>`, a fresh path that does not exist yet) and one approver `erin` (role
editor). Then, --reps times, one research run exactly as `groundwork demo --yes` drives it:

  ResearchSpec(run_id=<fresh>, question=<the demo's>, sources=[SourceTree(repo_id=p,
  package=p) for the 5 demo packages], destination="docs-site-r<n>"), default scripted
  branch and editor routes; start_research -> poll `get_state` every --poll-s (0.1 s)
  until `pending_approval` is set -> sign an APPROVE for exactly that request (revision,
  content hash, destination, scope) with contracts.approvals.sign and send the
  `decide_approval` update -> await the result -> check it is COMPLETED, the verifier
  said verified and the docs-site repo holds exactly one tag.

A fresh destination per rep matters: the publish effect's key is
`<article>:r<rev>:<content hash>:<destination>` and is global in the ledger, and the
scripted run writes the same bytes every time, so reusing one destination name across
reps would make later reps hit the first rep's effect row.

Figures per rep:
  demo_wall_s          start_research -> result() returned COMPLETED and checked
                       (the stack and the worker are up before; includes the poll delay
                       of at most --poll-s before the approval is seen)
  approval_wait_s      start -> pending approval seen by the poller
  publish_s            approval update sent -> result() returned
  activities_per_run   ActivityTaskScheduled events in the research workflow's history and
                       in every child workflow's (found from its StartChildWorkflow events,
                       recursively): run-<id>, run-<id>.branch-<repo>, run-<id>.editor-r<n>
                       (local activities would be MarkerRecorded: counted apart)
  history_bytes_total  sum over those workflows of the protobuf size of their history
                       (`History(events=...).ByteSize()` of `handle.fetch_history()`);
                       `history_json_chars_total` is the sum of `fetch_history().to_json()`
                       lengths, for comparison
  cpu_s_total          user+sys CPU seconds (psutil) of the worker process (with any
                       children), the Temporal dev server and PostgreSQL (postmaster and
                       backends) between start and verified COMPLETED; the bench process's
                       own CPU (the driver: polling, update, history fetches come after)
                       is given apart as `driver_cpu_s`, not in the total

Prints ONE JSON line on stdout (progress on stderr): the medians over reps, min and max,
every rep, and `targets_met` (demo_wall_s <= 30 with 5 source trees).

Usage:
  .venv/bin/python bench/flagship.py            # 5 reps, median
  .venv/bin/python bench/flagship.py --quick    # 1 rep
Options: --reps N, --poll-s S, --settle S (pause between reps, 2), --keep-workdir,
--reuse-destination (a probe, not the figure: every rep publishes to the same docs site, as
a repeated `groundwork demo` on one stack does; a later rep writes the same bytes, so its
publish settles as the first rep's effect (`publish_replayed: true`, the same tag)). Every process and temp dir it starts is
removed on exit, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._infra import (
    REPO,
    CpuMeter,
    Postgres,
    TemporalDev,
    machine,
    source_state,
    spawn,
    stop_process,
)
from bench._infra import log as _log

TASK_QUEUE = "gw-bench-flagship"
APPROVER = "erin"
SECRET = "bench-flagship-secret"
TARGET_DEMO_WALL_S = 30.0
METRICS = (
    "demo_wall_s",
    "approval_wait_s",
    "publish_s",
    "activities_per_run",
    "history_bytes_total",
    "history_json_chars_total",
    "cpu_s_total",
)


def log(msg: str) -> None:
    _log("flagship", msg)


class Worker:
    """`python -m cli worker` as its own process, configured through GROUNDWORK_* only."""

    def __init__(self, workdir: Path, address: str, database_url: str, reps: int) -> None:
        self.workdir = workdir
        self.log_path = workdir / "worker.log"
        self.targets = {
            f"docs-site-r{rep}": {"kind": "git", "path": str(workdir / f"docs-site-r{rep}")}
            for rep in range(reps)
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDWORK_")}
        env.update(
            GROUNDWORK_TEMPORAL_ADDRESS=address,
            GROUNDWORK_DATABASE_URL=database_url,
            GROUNDWORK_TASK_QUEUE=TASK_QUEUE,
            GROUNDWORK_HOME=str(workdir / "home"),
            GROUNDWORK_TARGETS=json.dumps(self.targets),
            GROUNDWORK_APPROVERS=json.dumps({APPROVER: {"secret": SECRET, "roles": ["editor"]}}),
            OPENAI_AGENTS_DISABLE_TRACING="1",
        )
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.proc = spawn([sys.executable, "-m", "cli", "worker"], self.log_path, env=self.env)
        deadline = time.monotonic() + 120
        while b"worker_started" not in self.log_path.read_bytes():
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"worker exited rc={self.proc.returncode}: {tail}")
            if time.monotonic() > deadline:
                raise RuntimeError("worker did not start within 120 s")
            await asyncio.sleep(0.2)

    def stop(self) -> None:
        stop_process(self.proc, grace=20)


async def histories(client: Any, workflow_id: str) -> list[dict[str, Any]]:
    """This workflow's history figures, then its children's (recursively)."""
    from temporalio.api.enums.v1 import EventType
    from temporalio.api.history.v1 import History

    history = await client.get_workflow_handle(workflow_id).fetch_history()
    events = list(history.events)
    scheduled: dict[str, int] = {}
    children: list[str] = []
    markers = 0
    # Scheduled -> completed per activity type (seconds, summed), from the event times.
    pending: dict[int, tuple[str, float]] = {}
    activity_s: dict[str, float] = {}
    for ev in events:
        at = ev.event_time.ToDatetime().timestamp()
        if ev.HasField("activity_task_scheduled_event_attributes"):
            name = ev.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[name] = scheduled.get(name, 0) + 1
            pending[ev.event_id] = (name, at)
        elif ev.HasField("activity_task_completed_event_attributes"):
            sched = ev.activity_task_completed_event_attributes.scheduled_event_id
            if sched in pending:
                name, t0 = pending.pop(sched)
                activity_s[name] = round(activity_s.get(name, 0.0) + at - t0, 3)
        elif ev.HasField("start_child_workflow_execution_initiated_event_attributes"):
            children.append(
                ev.start_child_workflow_execution_initiated_event_attributes.workflow_id
            )
        elif ev.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            markers += 1

    def label(e: Any) -> str:
        name = EventType.Name(e.event_type).removeprefix("EVENT_TYPE_")
        if e.HasField("activity_task_scheduled_event_attributes"):
            name += ":" + e.activity_task_scheduled_event_attributes.activity_type.name
        return f"{name}={e.ByteSize()}"

    largest = [label(e) for e in sorted(events, key=lambda e: e.ByteSize(), reverse=True)[:3]]
    first, last = events[0].event_time.ToDatetime(), events[-1].event_time.ToDatetime()
    own = {
        "workflow_id": workflow_id,
        "events": len(events),
        "history_bytes": History(events=events).ByteSize(),
        "history_json_chars": len(history.to_json()),
        "activities": sum(scheduled.values()),
        "activities_by_type": scheduled,
        "activity_s_by_type": activity_s,
        "markers": markers,
        "largest_events": largest,
        "span_s": round((last - first).total_seconds(), 3),
        "last_event": EventType.Name(events[-1].event_type).removeprefix("EVENT_TYPE_"),
    }
    out = [own]
    for child in children:
        out += await histories(client, child)
    return out


def cpu_by_process() -> dict[int, tuple[str, float]]:
    import psutil

    out: dict[int, tuple[str, float]] = {}
    for proc in psutil.process_iter(["name", "cpu_times"]):
        times = proc.info["cpu_times"]
        if times is not None:
            out[proc.pid] = (proc.info["name"] or "?", times.user + times.system)
    return out


def others_top(before: dict[int, tuple[str, float]], ours: set[int], n: int = 4) -> list[str]:
    """Which other processes used CPU meanwhile (name, pid, seconds): the machine's load."""
    import psutil

    spent: list[tuple[float, str]] = []
    for pid, (name, cpu) in cpu_by_process().items():
        if pid in ours:
            continue
        with contextlib.suppress(psutil.Error):
            if any(p.pid in ours for p in psutil.Process(pid).parents()):
                continue
        delta = cpu - before.get(pid, (name, 0.0))[1]
        if delta >= 0.05:
            spent.append((delta, f"{name}[{pid}]={delta:.2f}s"))
    return [label for _, label in sorted(spent, reverse=True)[:n]]


def git_tags(repo: str) -> list[str]:
    done = subprocess.run(["git", "-C", repo, "tag", "-l"], capture_output=True, text=True)
    return [t for t in done.stdout.split() if t] if done.returncode == 0 else []


async def one_run(
    client: Any,
    rep: int,
    worker: Worker,
    pids: dict[str, int],
    poll_s: float,
    reuse_destination: bool = False,
) -> dict[str, Any]:
    from temporalio.client import WorkflowFailureError
    from temporalio.service import RPCError
    from ulid import ULID

    from cli.demo import DEMO_QUESTION
    from contracts.approvals import ApprovalDecision, DecisionResult, Verdict, sign
    from contracts.research import ResearchSpec, ResearchState, SourceTree
    from contracts.run import RunResult
    from contracts.status import RunStatus
    from workers.research_client import DEFAULT_PACKAGES, start_research

    destination = "docs-site-r0" if reuse_destination else f"docs-site-r{rep}"
    spec = ResearchSpec(
        run_id=str(ULID()),
        question=DEMO_QUESTION,
        sources=[SourceTree(repo_id=p, package=p) for p in DEFAULT_PACKAGES],
        destination=destination,
    )
    meter = CpuMeter(pids, trees=frozenset(pids))
    procs0 = cpu_by_process()
    driver0 = time.process_time()
    meter.start()
    t0 = time.perf_counter()
    handle = await start_research(client, spec, TASK_QUEUE)
    result_task: asyncio.Future[RunResult] = asyncio.ensure_future(handle.result())
    approval_wait = publish_t0 = None
    decided: DecisionResult | None = None
    while not result_task.done():
        try:
            state: ResearchState | None = await handle.query("get_state", result_type=ResearchState)
        except RPCError:
            state = None  # no worker has taken the run yet
        pending = state.pending_approval if state is not None else None
        if pending is not None and decided is None:
            approval_wait = time.perf_counter() - t0
            unsigned = ApprovalDecision(
                approval_id=pending.approval_id, verdict=Verdict.APPROVE, principal=APPROVER,
                subject=pending.subject, revision=pending.revision,
                content_hash=pending.content_hash, destination=pending.destination,
                scope=pending.scope,
            )  # fmt: skip
            decision = unsigned.model_copy(update={"signature": sign(unsigned, SECRET)})
            publish_t0 = time.perf_counter()
            decided = await handle.execute_update(
                "decide_approval", decision, result_type=DecisionResult
            )
            if not decided.accepted:
                raise RuntimeError(f"approval refused: {decided.message}")
            continue
        await asyncio.wait({result_task}, timeout=poll_s)
    failure: str | None = None
    try:
        result = result_task.result()
    except WorkflowFailureError as err:
        failure = f"WorkflowFailureError: {err.cause}"
        result = None
    final: ResearchState = await handle.query("get_state", result_type=ResearchState)
    t_end = time.perf_counter()
    wall = t_end - t0
    used, busy = meter.stop()
    driver_cpu = time.process_time() - driver0
    others = others_top(procs0, {*pids.values(), os.getpid()})
    tags = git_tags(worker.targets[destination]["path"])
    verified = final.verification is not None and final.verification.verified
    if failure is None and (result is None or result.status is not RunStatus.COMPLETED):
        failure = f"result status {result.status if result else None}: {final.failure_message}"
    if failure is None and not verified:
        failure = f"not verified: {final.verification}"
    if failure is None and len(tags) != 1:
        failure = f"docs-site holds tags {tags}, expected exactly one"
    flows = await histories(client, handle.id)
    return {
        "rep": rep,
        "run_id": spec.run_id,
        "ok": failure is None,
        "failure": failure,
        "status": final.status.value,
        "demo_wall_s": round(wall, 3),
        "approval_wait_s": round(approval_wait, 3) if approval_wait is not None else None,
        "publish_s": round(t_end - publish_t0, 3) if publish_t0 is not None else None,
        "activities_per_run": sum(f["activities"] for f in flows),
        "markers_per_run": sum(f["markers"] for f in flows),
        "workflows_per_run": len(flows),
        "history_bytes_total": sum(f["history_bytes"] for f in flows),
        "history_json_chars_total": sum(f["history_json_chars"] for f in flows),
        "history_events_total": sum(f["events"] for f in flows),
        "cpu_s_total": round(sum(used.values()), 3),
        "cpu_s": {k: round(v, 3) for k, v in used.items()},
        "driver_cpu_s": round(driver_cpu, 3),
        "machine": busy,
        "others_top": others,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "revisions": len(final.drafts),
        "publish_replayed": next(
            (e.data.get("replayed") for e in final.last_events if e.type == "EffectSettled"), None
        ),
        "branches": {k: b.status.value for k, b in final.branches.items()},
        "tag": tags[0] if len(tags) == 1 else tags,
        "workflows": flows,
    }


def stats(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


async def bench(args: argparse.Namespace, workdir: Path, result: dict[str, Any]) -> None:
    from workers.client import connect

    pg, temporal = Postgres(workdir), TemporalDev(workdir)
    worker: Worker | None = None
    try:
        log("starting embedded PostgreSQL and a Temporal dev server")
        database_url = await pg.start()
        address = await temporal.start()
        worker = Worker(workdir, address, database_url, args.reps)
        log("starting one worker (python -m cli worker)")
        await worker.start()
        assert worker.proc is not None
        assert temporal.proc is not None
        assert pg.pid is not None
        pids = {"worker": worker.proc.pid, "temporal": temporal.proc.pid, "postgres": pg.pid}
        result["pids"] = {**pids, "driver": os.getpid()}
        client = await connect(address)
        reps: list[dict[str, Any]] = []
        for rep in range(args.reps):
            if rep:
                await asyncio.sleep(args.settle)
            r = await one_run(client, rep, worker, pids, args.poll_s, args.reuse_destination)
            log(
                f"rep {rep}: {'ok' if r['ok'] else 'FAILED ' + str(r['failure'])} "
                f"wall {r['demo_wall_s']} s (approval at {r['approval_wait_s']} s, publish "
                f"{r['publish_s']} s), {r['activities_per_run']} activities in "
                f"{r['workflows_per_run']} workflows, {r['history_bytes_total']} history bytes, "
                f"cpu {r['cpu_s']} others {r['machine']['others_cores']} cores"
            )
            reps.append(r)
        ok = [r for r in reps if r["ok"]]
        summary = {
            m: stats([r[m] for r in ok])
            for m in METRICS
            if ok and all(r[m] is not None for r in ok)
        }
        result.update({m: s["median"] for m, s in summary.items()})
        result.update(
            sources=len(reps[0]["branches"]) if reps else 0,
            reps_ok=len(ok),
            summary=summary,
            cpu_s_median={k: round(statistics.median(r["cpu_s"][k] for r in ok), 3) for k in pids}
            if ok
            else {},
            driver_cpu_s_median=round(statistics.median(r["driver_cpu_s"] for r in ok), 3)
            if ok
            else None,
            others_cores_median=round(
                statistics.median(r["machine"]["others_cores"] for r in reps), 3
            ),
            targets_met={
                f"demo_wall_s<={TARGET_DEMO_WALL_S:.0f}": bool(ok)
                and len(ok) == len(reps)
                and result["demo_wall_s"] <= TARGET_DEMO_WALL_S
            },
            failures=[{"rep": r["rep"], "failure": r["failure"]} for r in reps if not r["ok"]],
            reps=len(reps),
            per_rep={m: [r[m] for r in reps] for m in METRICS},
            reps_detail=[{k: v for k, v in r.items() if k != "workflows"} for r in reps],
            workflows_rep0=reps[0]["workflows"] if reps else [],
        )
        if not ok:
            tail = worker.log_path.read_text(errors="replace")[-3000:]
            result["worker_log_tail"] = tail
    finally:
        if worker is not None:
            worker.stop()
        temporal.stop()
        pg.stop()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 rep")
    parser.add_argument("--reps", type=int, help="reps (5; quick 1)")
    parser.add_argument("--poll-s", type=float, default=0.1, help="get_state poll interval")
    parser.add_argument("--settle", type=float, default=2.0, help="pause between reps (s)")
    parser.add_argument("--keep-workdir", action="store_true")
    parser.add_argument(
        "--reuse-destination",
        action="store_true",
        help="probe, not the figure: every rep publishes to docs-site-r0 (a repeated demo)",
    )
    args = parser.parse_args()
    if args.reps is None:
        args.reps = 1 if args.quick else 5
    return args


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    task = asyncio.current_task()
    if task is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    workdir = Path(tempfile.mkdtemp(prefix="gw-flagship-"))
    started = time.time()
    result: dict[str, Any] = {
        "benchmark": "flagship",
        "params": {
            "mode": "quick" if args.quick else "default",
            "reps": args.reps,
            "poll_s": args.poll_s,
            "settle_s": args.settle,
            "reuse_destination": args.reuse_destination,
            "routes": "scripted:research-branch / scripted:research-editor (defaults)",
            "history_bytes": "protobuf History(events).ByteSize(); json: len(to_json())",
            "cpu": "worker process tree + temporal dev server + postgres (postmaster+backends)",
        },
        "machine": machine(),
        "source": source_state(("workflows", "activities", "contracts", "definitions", "workers")),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
    }
    try:
        await bench(args, workdir, result)
    finally:
        if args.keep_workdir:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    result["wall_s"] = round(time.time() - started, 1)
    result["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main() -> None:
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    os.chdir(REPO)
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
