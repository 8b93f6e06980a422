#!/usr/bin/env python
"""Inputs: how many inputs per second the trigger service's input plane logs durably.

One invocation starts its own stack: an embedded PostgreSQL (migrated), a Temporal dev
server (the service connects to it at start; PROJECT inputs never touch it), and the real
service as `python -m cli serve` with one bearer token, no policy file (so every input's
disposition is PROJECT: logged, with its outbox row, and settled by the service's own
activation relay) and the per-token rate limit raised out of the way. Then, --reps times:

  1. `unique`: bench/_inputs_load.py in its own process, --concurrency (32) keep-alive
     connections posting envelopes with fresh source_event_ids back to back for
     --duration seconds after --warmup seconds. Every 202 means the input row and its
     outbox row were committed (fsync on) before the answer. Figures: accepted_per_s
     (202s / wall), p50_ms, p99_ms (client-side, per request, nearest rank).
  2. `dedupe`: the same client logs --seed-ids inputs, then re-sends exactly those bodies
     at the same concurrency: every answer must be 200 duplicate. Figure: dedupe_per_s.

CPU of the service (with any worker processes it forks), PostgreSQL (postmaster and
backends) and the client is metered during each phase, with the cores other work on the
machine used. Afterwards the bench checks that the inputs table holds at least every
counted 202 and that the relay settled every outbox row.

Prints ONE JSON line on stdout (progress on stderr): the medians over reps, every rep,
and `targets_met` (accepted_per_s >= 1000 with p99_ms <= 50).

Usage:
  .venv/bin/python bench/inputs.py            # 5 reps of 15 s per phase (~4 min)
  .venv/bin/python bench/inputs.py --quick    # 3 reps of 5 s per phase (~1.5 min)
Options: --concurrency, --duration, --warmup, --reps, --seed-ids, --service-env KEY=VALUE
(extra environment for the service, repeatable, e.g. GROUNDWORK_TRIGGER_WORKERS=2),
--keep-workdir, --profile FILE.svg (py-spy flame graph of the service during rep 0's accept
phase; py-spy must be on PATH or in the venv). Every process and temp dir it starts is removed on exit.
"""

from __future__ import annotations

import argparse
import asyncio
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

import httpx2
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._infra import (
    REPO,
    CpuMeter,
    Postgres,
    TemporalDev,
    free_ports,
    machine,
    source_state,
    spawn,
    stop_process,
)
from bench._infra import log as _log

TOKEN = "tok-bench"
TARGET_ACCEPTED_PER_S = 1000.0
TARGET_P99_MS = 50.0


def log(msg: str) -> None:
    _log("inputs", msg)


class Service:
    def __init__(
        self, workdir: Path, address: str, database_url: str, pg_pid: int, extra: dict[str, str]
    ) -> None:
        self.workdir = workdir
        self.pg_pid = pg_pid
        self.database_url = database_url
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDWORK_")}
        env.update(
            GROUNDWORK_TEMPORAL_ADDRESS=address,
            GROUNDWORK_DATABASE_URL=database_url,
            GROUNDWORK_HOME=str(workdir / "home"),
            GROUNDWORK_TASK_QUEUE="gw-bench-inputs",
            GROUNDWORK_TRIGGER_TOKENS=json.dumps(
                {TOKEN: {"tenant": "bench", "principal": "loadgen", "roles": []}}
            ),
            GROUNDWORK_TRIGGER_RATE_PER_S="1000000",
            GROUNDWORK_TRIGGER_RATE_BURST="1000000",
            GROUNDWORK_LOG_LEVEL="WARNING",
            OPENAI_AGENTS_DISABLE_TRACING="1",
        )
        env.update(extra)
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.proc = spawn(
            [sys.executable, "-m", "cli", "serve", "--port", str(self.port)],
            self.workdir / "service.log",
            env=self.env,
        )
        deadline = time.monotonic() + 60
        async with httpx2.AsyncClient(timeout=2) as client:
            while True:
                if self.proc.poll() is not None:
                    tail = (self.workdir / "service.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"service exited rc={self.proc.returncode}: {tail}")
                try:
                    if (await client.get(f"{self.url}/healthz")).status_code == 200:
                        return
                except httpx2.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("service did not come up in 60 s")
                await asyncio.sleep(0.2)

    def stop(self) -> None:
        stop_process(self.proc)


async def load(
    service: Service, args: argparse.Namespace, mode: str, profile: Path | None = None
) -> dict[str, Any]:
    cmd = [
        *(sys.executable, str(REPO / "bench" / "_inputs_load.py")),
        *("--port", str(service.port), "--token", TOKEN, "--mode", mode),
        *("--concurrency", str(args.concurrency), "--duration", str(args.duration)),
        *("--warmup", str(args.warmup), "--seed-ids", str(args.seed_ids)),
    ]
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO
    )
    assert proc.pid is not None
    assert service.proc is not None
    # Meter from the end of the client's warm-up to its end (the client counts the same span).
    await asyncio.sleep(args.warmup + (0.3 if mode == "unique" else 1.0))
    meter = CpuMeter(
        {"service": service.proc.pid, "postgres": service.pg_pid},
        trees=frozenset({"service", "postgres"}),
    )
    meter.start()
    settled0 = (await asyncio.to_thread(db_counts, service.database_url))["settled"]
    profiler = None
    if profile is not None:
        profiler = await asyncio.create_subprocess_exec(
            *(str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(service.proc.pid), "--subprocesses"),
            *("--duration", str(max(1, int(args.duration - 1))), "--rate", "200"),
            *("--format", "speedscope" if profile.suffix == ".json" else "flamegraph"),
            *("--output", str(profile), "--nonblocking"),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
    out, err = await proc.communicate()
    used, busy = meter.stop()
    settled1 = (await asyncio.to_thread(db_counts, service.database_url))["settled"]
    if profiler is not None:
        await profiler.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"load client failed: {err.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    # The client reports its own CPU over the counted span (it has exited by now).
    used["client"] = result["client_cpu_s"] * busy["wall_s"] / result["wall_s"]
    busy["others_cores"] = round(
        max(0.0, busy["others_cores"] - used["client"] / busy["wall_s"]), 3
    )
    busy["ours_cores"] = round(busy["ours_cores"] + used["client"] / busy["wall_s"], 3)
    requests = max(1, result["requests"])
    result["cpu_ms_per_request"] = {k: round(v * 1000 / requests, 3) for k, v in used.items()}
    result["cores"] = {k: round(v / busy["wall_s"], 3) for k, v in used.items()}
    result["machine"] = busy
    # How fast the service's activation relay settled outbox rows meanwhile (it runs in the
    # same process; a relay slower than the accept rate leaves a growing backlog).
    result["relay_settled_per_s"] = round((settled1 - settled0) / busy["wall_s"], 1)
    return result


def db_counts(database_url: str) -> dict[str, int]:
    with psycopg.connect(database_url) as conn:
        inputs = conn.execute("SELECT count(*) FROM inputs").fetchone()
        pending = conn.execute(
            "SELECT count(*) FROM activation_outbox WHERE status = 'pending'"
        ).fetchone()
        settled = conn.execute(
            "SELECT count(*) FROM activation_outbox WHERE status <> 'pending'"
        ).fetchone()
    assert inputs is not None
    assert pending is not None
    assert settled is not None
    return {"inputs": int(inputs[0]), "outbox_pending": int(pending[0]), "settled": int(settled[0])}


def median(reps: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(r[key] for r in reps), 2)


async def bench(args: argparse.Namespace, workdir: Path, result: dict[str, Any]) -> None:
    pg, temporal = Postgres(workdir), TemporalDev(workdir)
    service: Service | None = None
    try:
        log("starting embedded PostgreSQL and a Temporal dev server")
        database_url = await pg.start()
        address = await temporal.start()
        extra = dict(kv.split("=", 1) for kv in args.service_env)
        assert pg.pid is not None
        service = Service(workdir, address, database_url, pg.pid, extra)
        log(f"starting the trigger service on {service.url} ({extra or 'defaults'})")
        await service.start()
        unique: list[dict[str, Any]] = []
        dedupe: list[dict[str, Any]] = []
        for rep in range(args.reps):
            u = await load(service, args, "unique", args.profile if rep == 0 else None)
            log(
                f"rep {rep} unique: {u['ok_per_s']}/s p50 {u['p50_ms']} p99 {u['p99_ms']} ms, "
                f"statuses {u['statuses']}, cores {u['cores']}"
            )
            unique.append(u)
            d = await load(service, args, "dedupe")
            log(f"rep {rep} dedupe: {d['ok_per_s']}/s p99 {d['p99_ms']} ms, {d['statuses']}")
            dedupe.append(d)
        # Give the relay time to settle the backlog (up to 60 s), then check.
        for _ in range(120):
            if (await asyncio.to_thread(db_counts, database_url))["outbox_pending"] == 0:
                break
            await asyncio.sleep(0.5)
        counts = await asyncio.to_thread(db_counts, database_url)
        counted_202 = sum(r["statuses"].get("202", 0) for r in unique)
        errors = sum(n for r in unique + dedupe for s, n in r["statuses"].items() if int(s) >= 400)
        accepted = median(unique, "ok_per_s")
        p99 = median(unique, "p99_ms")
        result.update(
            accepted_per_s=accepted,
            p50_ms=median(unique, "p50_ms"),
            p99_ms=p99,
            dedupe_per_s=median(dedupe, "ok_per_s"),
            dedupe_p99_ms=median(dedupe, "p99_ms"),
            client_cores_median=round(statistics.median(r["client_cores"] for r in unique), 3),
            service_cpu_ms_per_input=round(
                statistics.median(r["cpu_ms_per_request"]["service"] for r in unique), 3
            ),
            postgres_cpu_ms_per_input=round(
                statistics.median(r["cpu_ms_per_request"]["postgres"] for r in unique), 3
            ),
            relay_settled_per_s=median(unique, "relay_settled_per_s"),
            others_cores_median=round(
                statistics.median(r["machine"]["others_cores"] for r in unique + dedupe), 3
            ),
            checks={
                **counts,
                "counted_202": counted_202,
                "every_202_stored": counts["inputs"] >= counted_202,
                "outbox_settled": counts["outbox_pending"] == 0,
                "error_responses": errors,
            },
            targets_met={
                f"accepted_per_s>={TARGET_ACCEPTED_PER_S:.0f}": accepted >= TARGET_ACCEPTED_PER_S,
                f"p99_ms<={TARGET_P99_MS:.0f}": p99 <= TARGET_P99_MS,
            },
            reps={"unique": unique, "dedupe": dedupe},
        )
    finally:
        if service is not None:
            service.stop()
        temporal.stop()
        pg.stop()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 reps of 5 s per phase")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, help="seconds per phase (15; quick 5)")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--reps", type=int, help="reps (5; quick 3)")
    parser.add_argument("--seed-ids", type=int, default=256)
    parser.add_argument("--service-env", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--keep-workdir", action="store_true")
    parser.add_argument(
        "--profile", type=Path, help="py-spy the service in rep 0's unique phase (.svg or .json)"
    )
    args = parser.parse_args()
    if args.duration is None:
        args.duration = 5.0 if args.quick else 15.0
    if args.reps is None:
        args.reps = 3 if args.quick else 5
    return args


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    task = asyncio.current_task()
    if task is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    workdir = Path(tempfile.mkdtemp(prefix="gw-inputs-"))
    started = time.time()
    result: dict[str, Any] = {
        "benchmark": "inputs",
        "params": {
            "mode": "quick" if args.quick else "default",
            "concurrency": args.concurrency,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "reps": args.reps,
            "seed_ids": args.seed_ids,
            "service_env": args.service_env,
            "disposition": "PROJECT",
        },
        "machine": machine(),
        "source": source_state(),
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
