"""A real HTTP effect target with an Idempotency-Key API, a lookup-by-key endpoint and faults.

Tests and benchmarks run it as a separate process, so the ledger is exercised against a
system it does not control: committed effects live in a SQLite file and survive a restart,
and faults armed over HTTP reproduce the failures reconciliation exists for (a commit whose
response is lost, a hang past the client's timeout, a 5xx, an unanswerable lookup).

    POST   /effects          Idempotency-Key + X-Request-Hash headers, JSON body
    GET    /effects/{key}    the receipt (key URL-encoded) or 404 {"error": "not_found"}
    GET    /stats            {"commits": {key: n}, "total": n, "requests": n}
    POST   /faults           arm {"mode", "times", "key_prefix", "hang_s", "method", "probability"}
    GET    /faults           armed faults
    DELETE /faults           clear them
    GET    /healthz

Run: `python -m adapters.targets.http_service --port 0 --db target.sqlite`; it prints one
line `listening on http://HOST:PORT` once it accepts connections.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import signal
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import unquote, urlsplit

FAULT_MODES = frozenset(
    {"commit_then_drop", "hang", "error_5xx", "drop_before_commit", "lookup_unknown"}
)
_DEFAULT_METHOD = {"lookup_unknown": "GET"}
_MAX_BODY = 16 * 1024 * 1024

_SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (
    seq          INTEGER PRIMARY KEY,
    key          TEXT NOT NULL UNIQUE,
    request_hash TEXT NOT NULL,
    body         TEXT NOT NULL,
    created_at   TEXT NOT NULL
);
"""


class EffectStore:
    """Committed effects in SQLite; one connection behind a lock, so commits are serialized.

    Serializing makes "is the key there? else insert" atomic without relying on SQLite's
    busy handling, and `synchronous=FULL` makes a 201 mean the effect survives a crash.
    """

    def __init__(self, db_path: Path) -> None:
        db_path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(db_path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @staticmethod
    def _receipt(row: tuple[Any, ...], created: bool) -> dict[str, Any]:
        seq, key, request_hash, body, created_at = row
        return {
            "key": key,
            "ref": f"eff-{seq}",
            "request_hash": request_hash,
            "created": created,
            "created_at": created_at,
            "payload": json.loads(body),
        }

    def _select(self, key: str) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = self._db.execute(
            "SELECT seq, key, request_hash, body, created_at FROM effects WHERE key = ?", (key,)
        ).fetchone()
        return row

    def commit(self, key: str, request_hash: str, body: str) -> tuple[int, dict[str, Any]]:
        """Create the effect once per key: (201, receipt), (200, stored receipt) or (409, error)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._select(key)
                if row is None:
                    now = datetime.now(UTC).isoformat()
                    self._db.execute(
                        "INSERT INTO effects (key, request_hash, body, created_at)"
                        " VALUES (?, ?, ?, ?)",
                        (key, request_hash, body, now),
                    )
                    row = self._select(key)
                    assert row is not None
                    self._db.execute("COMMIT")
                    return 201, self._receipt(row, created=True)
                self._db.execute("ROLLBACK")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        if row[2] != request_hash:
            return 409, {
                "error": "conflict",
                "key": key,
                "request_hash": row[2],
                "got_request_hash": request_hash,
                "ref": f"eff-{row[0]}",
            }
        return 200, self._receipt(row, created=False)

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._select(key)
        return None if row is None else self._receipt(row, created=False)

    def commit_counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT key, COUNT(*) FROM effects GROUP BY key").fetchall()
        return {key: count for key, count in rows}


@dataclass
class Fault:
    """One armed fault; `times` = -1 keeps it armed until cleared."""

    mode: str
    times: int = 1
    key_prefix: str | None = None
    hang_s: float = 5.0
    method: str = "POST"
    probability: float = 1.0

    @classmethod
    def parse(cls, spec: Any) -> Fault:
        """Validate a POST /faults body; ValueError names the bad field."""
        if not isinstance(spec, dict):
            raise ValueError("fault must be a JSON object")
        mode = spec.get("mode")
        if mode not in FAULT_MODES:
            raise ValueError(f"mode must be one of {sorted(FAULT_MODES)}")
        times = spec.get("times", 1)
        if not isinstance(times, int) or isinstance(times, bool) or (times < 1 and times != -1):
            raise ValueError("times must be a positive integer, or -1 for until cleared")
        prefix = spec.get("key_prefix")
        if prefix is not None and not isinstance(prefix, str):
            raise ValueError("key_prefix must be a string")
        hang_s = spec.get("hang_s", 5.0)
        if not isinstance(hang_s, int | float) or isinstance(hang_s, bool) or hang_s < 0:
            raise ValueError("hang_s must be a non-negative number")
        method = spec.get("method", _DEFAULT_METHOD.get(mode, "POST"))
        if method not in ("POST", "GET"):
            raise ValueError("method must be POST or GET")
        probability = spec.get("probability", 1.0)
        if not isinstance(probability, int | float) or not 0 < probability <= 1:
            raise ValueError("probability must be in (0, 1]")
        return cls(mode, times, prefix, float(hang_s), method, float(probability))


class FaultBoard:
    """Armed faults, consumed in arming order by the requests they match."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def arm(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def clear(self) -> int:
        with self._lock:
            cleared = len(self._faults)
            self._faults.clear()
        return cleared

    def listing(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(fault) for fault in self._faults]

    def take(self, method: str, key: str) -> Fault | None:
        """The first fault matching this request, with one use consumed."""
        with self._lock:
            for fault in self._faults:
                if fault.method != method:
                    continue
                if fault.key_prefix is not None and not key.startswith(fault.key_prefix):
                    continue
                if fault.probability < 1 and random.random() >= fault.probability:
                    continue
                if fault.times > 0:
                    fault.times -= 1
                    if fault.times == 0:
                        self._faults.remove(fault)
                return fault
        return None


class TargetServer(ThreadingHTTPServer):
    """The HTTP server plus the state its handlers share."""

    daemon_threads = True
    request_queue_size = 256  # socketserver's default backlog of 5 drops bursts of clients

    def __init__(self, address: tuple[str, int], store: EffectStore, verbose: bool) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.store = store
        self.faults = FaultBoard()
        self.verbose = verbose
        self._requests = 0
        self._requests_lock = threading.Lock()
        super().__init__(address, _Handler)

    def count_request(self) -> None:
        with self._requests_lock:
            self._requests += 1

    @property
    def requests(self) -> int:
        """Requests to /effects since this process started (not persisted: diagnostics only)."""
        with self._requests_lock:
            return self._requests

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), self.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}"


class _Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive, so every answer carries a Content-Length."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, delayed ACKs add ~40 ms to each.
    disable_nagle_algorithm = True
    server: TargetServer

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    # -- plumbing ---------------------------------------------------------------------

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (e.g. timed out during a hang); the commit stands.
            self.close_connection = True

    def _drop(self) -> None:
        """Close the connection without a byte of response: the client sees a dropped socket."""
        self.close_connection = True
        with contextlib.suppress(OSError):  # the peer may already be gone
            self.connection.shutdown(socket.SHUT_RDWR)

    def _read_body(self) -> bytes | None:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._send(411, {"error": "length_required"})
            return None
        if int(length) > _MAX_BODY:
            self._send(413, {"error": "too_large"})
            self.close_connection = True
            return None
        return self.rfile.read(int(length))

    def _path(self) -> str:
        return urlsplit(self.path).path

    def _guarded(self, handler: Any) -> None:
        try:
            handler()
        except Exception as err:
            self.log_error("internal error: %r", err)
            self._send(500, {"error": "internal", "detail": repr(err)})

    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_POST(self) -> None:
        self._guarded(self._post)

    def do_DELETE(self) -> None:
        self._guarded(self._delete)

    # -- routes -----------------------------------------------------------------------

    def _get(self) -> None:
        path = self._path()
        if path == "/healthz":
            self._send(200, {"ok": True})
        elif path == "/stats":
            counts = self.server.store.commit_counts()
            self._send(
                200,
                {
                    "commits": counts,
                    "total": sum(counts.values()),
                    "requests": self.server.requests,
                },
            )
        elif path == "/faults":
            self._send(200, {"faults": self.server.faults.listing()})
        elif path.startswith("/effects/") and len(path) > len("/effects/"):
            self.server.count_request()
            self._lookup(unquote(path[len("/effects/") :]))
        else:
            self._send(404, {"error": "no_such_route", "path": path})

    def _lookup(self, key: str) -> None:
        fault = self.server.faults.take("GET", key)
        if fault is not None:
            if fault.mode == "hang":
                time.sleep(fault.hang_s)
            elif fault.mode in ("drop_before_commit", "commit_then_drop"):
                self._drop()
                return
            else:  # lookup_unknown, error_5xx: the target cannot tell
                self._send(503, {"error": "injected_fault", "mode": fault.mode})
                return
        receipt = self.server.store.get(key)
        if receipt is None:
            self._send(404, {"error": "not_found", "key": key})
        else:
            self._send(200, receipt)

    def _post(self) -> None:
        path = self._path()
        if path == "/effects":
            self.server.count_request()
            self._create()
        elif path == "/faults":
            body = self._read_body()
            if body is None:
                return
            try:
                fault = Fault.parse(json.loads(body or b"{}"))
            except ValueError as err:  # JSONDecodeError is a ValueError
                self._send(400, {"error": "bad_fault", "detail": str(err)})
                return
            self.server.faults.arm(fault)
            self._send(201, {"armed": asdict(fault)})
        else:
            self._send(404, {"error": "no_such_route", "path": path})

    def _delete(self) -> None:
        if self._path() == "/faults":
            self._send(200, {"cleared": self.server.faults.clear()})
        else:
            self._send(404, {"error": "no_such_route", "path": self._path()})

    def _create(self) -> None:
        body = self._read_body()
        if body is None:
            return
        key = self.headers.get("Idempotency-Key")
        request_hash = self.headers.get("X-Request-Hash")
        if not key:
            self._send(400, {"error": "missing_idempotency_key"})
            return
        if not request_hash:
            self._send(400, {"error": "missing_request_hash"})
            return
        try:
            text = body.decode()
            json.loads(text)
        except ValueError:
            self._send(400, {"error": "body_not_json"})
            return
        fault = self.server.faults.take("POST", key)
        mode = fault.mode if fault is not None else None
        if fault is not None and mode == "hang":
            time.sleep(fault.hang_s)  # then carry on: the commit lands after the client gave up
        if mode in ("error_5xx", "lookup_unknown"):
            self._send(503, {"error": "injected_fault", "mode": mode})
            return
        if mode == "drop_before_commit":
            self._drop()
            return
        status, answer = self.server.store.commit(key, request_hash, text)
        if mode == "commit_then_drop":
            self._drop()
            return
        self._send(status, answer)


def make_server(host: str, port: int, db_path: str | Path, verbose: bool = False) -> TargetServer:
    """Bind (port 0 picks a free one) and open the store; `serve_forever()` runs it."""
    store = EffectStore(Path(db_path))
    try:
        return TargetServer((host, port), store, verbose)
    except BaseException:
        store.close()
        raise


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(host: str, port: int, db_path: str | Path, verbose: bool = False) -> None:
    """Serve in the foreground until SIGINT/SIGTERM; the ready line goes to stdout."""
    server = make_server(host, port, db_path, verbose)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupt)
    print(f"listening on {server.url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.store.close()


def _cli(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m adapters.targets.http_service",
        description="HTTP effect target with Idempotency-Key, lookup by key and fault injection.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8099, help="0 picks a free port")
    parser.add_argument("--db", default="target.sqlite", help="SQLite file of committed effects")
    parser.add_argument("--verbose", action="store_true", help="log each request to stderr")
    args = parser.parse_args(argv)
    try:
        main(args.host, args.port, args.db, args.verbose)
    except OSError as err:
        print(f"error: cannot listen on {args.host}:{args.port}: {err}", file=sys.stderr)
        raise SystemExit(1) from err


if __name__ == "__main__":
    _cli()
