#!/usr/bin/env python
"""Load generator for bench/inputs.py, run as its own process so its CPU is its own.

C keep-alive HTTP/1.1 connections (plain asyncio streams, no HTTP library: a few tens of
microseconds of client CPU per request), each sending POST /v1/inputs back to back.
Modes: `unique` (a fresh source_event_id per request: the accept path, expect 202) and
`dedupe` (first logs --seed-ids inputs, then re-sends exactly those bodies: the dedupe
path, expect 200 with duplicate=true). Requests in the first --warmup seconds are sent but
not counted. Prints one JSON line: counts by status, rate of expected answers, latency
percentiles (ms), and this process's own CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import resource
import sys
import time
import uuid


def body_for(source_event_id: str, n: int) -> bytes:
    return json.dumps(
        {
            "source_event_id": source_event_id,
            "kind": "event",
            "type": "bench.tick",
            "source": "bench",
            "subject": f"subject-{n % 100}",
            "data": {"n": n, "note": "input-plane benchmark"},
        },
        separators=(",", ":"),
    ).encode()


def request_bytes(host: str, token: str, body: bytes) -> bytes:
    head = (
        f"POST /v1/inputs HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def roundtrip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes
) -> tuple[int, bytes]:
    writer.write(payload)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length = 0
    for line in lines[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:].strip())
    return status, await reader.readexactly(length) if length else b""


def pct(values: list[float], q: float) -> float | None:
    v = sorted(values)
    if not v:
        return None
    return v[max(0, min(len(v) - 1, math.ceil(q * len(v)) - 1))]  # nearest rank


async def main(args: argparse.Namespace) -> dict[str, object]:
    host = f"{args.host}:{args.port}"
    prefix = uuid.uuid4().hex[:10]
    expected = 202 if args.mode == "unique" else 200
    seeded: list[bytes] = []
    if args.mode == "dedupe":
        reader, writer = await asyncio.open_connection(args.host, args.port)
        for i in range(args.seed_ids):
            payload = request_bytes(host, args.token, body_for(f"dup-{prefix}-{i}", i))
            status, _ = await roundtrip(reader, writer, payload)
            if status != 202:
                raise SystemExit(f"seeding failed: HTTP {status}")
            seeded.append(payload)
        writer.close()

    statuses: dict[int, int] = {}
    latencies: list[float] = []
    timeline: list[tuple[float, float]] = []
    counting = False
    stop = False
    counter = 0

    async def client(c: int) -> None:
        nonlocal counter
        reader, writer = await asyncio.open_connection(args.host, args.port)
        i = 0
        while not stop:
            if seeded:
                payload = seeded[(c * 7919 + i) % len(seeded)]
            else:
                counter += 1
                payload = request_bytes(host, args.token, body_for(f"u-{prefix}-{c}-{i}", counter))
            i += 1
            t0 = time.perf_counter()
            status, _ = await roundtrip(reader, writer, payload)
            elapsed = time.perf_counter() - t0
            if counting:
                statuses[status] = statuses.get(status, 0) + 1
                latencies.append(elapsed * 1000)
                if args.dump:
                    timeline.append((round(t0, 4), round(elapsed * 1000, 2)))
        writer.close()

    tasks = [asyncio.create_task(client(c)) for c in range(args.concurrency)]
    await asyncio.sleep(args.warmup)
    counting = True
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    await asyncio.sleep(args.duration)
    counting = False
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    stop = True
    await asyncio.gather(*tasks)
    if args.dump:
        with open(args.dump, "w") as out:
            json.dump(timeline, out)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    good = statuses.get(expected, 0)
    return {
        "mode": args.mode,
        "concurrency": args.concurrency,
        "wall_s": round(wall, 3),
        "requests": sum(statuses.values()),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "expected_status": expected,
        "ok_per_s": round(good / wall, 1),
        "p50_ms": round(pct(latencies, 0.50) or 0.0, 2),
        "p90_ms": round(pct(latencies, 0.90) or 0.0, 2),
        "p99_ms": round(pct(latencies, 0.99) or 0.0, 2),
        "max_ms": round(max(latencies, default=0.0), 2),
        "client_cpu_s": round(cpu, 3),
        "client_cores": round(cpu / wall, 3),
        "client_cpu_us_per_request": round(cpu / max(1, sum(statuses.values())) * 1e6, 1),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--mode", choices=["unique", "dedupe"], default="unique")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--seed-ids", type=int, default=256)
    parser.add_argument("--dump", help="write [start, latency_ms] of every counted request here")
    print(json.dumps(asyncio.run(main(parser.parse_args())), separators=(",", ":")))
    sys.stdout.flush()
