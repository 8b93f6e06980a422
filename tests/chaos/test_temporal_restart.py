"""The Temporal server is SIGKILLed while a governed write is at the target: one effect.

The dev server here keeps its state in a SQLite file, as `groundwork up` runs it. It dies
after the dispatch claimed the effect and while the HTTP target holds the request; the
target commits and answers while the server is down, so the worker cannot report the
activity's result. The server comes back on the same file and port, and the run must
end COMPLETED with one request ever sent, one commit at the target, the ledger row
`succeeded` and one domain event. Whatever Temporal does about the result it never got
(the worker's report retried, or the activity timed out and dispatched again), the
ledger answers any repeat from its row, and nothing reaches the target twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from adapters.ledger import EffectLedger
from contracts.effects import EffectStatus
from contracts.run import ActivityTimeouts, RunResult
from definitions.notes_writer import note_effect_key
from tests.chaos.evidence import assert_one_http_effect, log_events
from tests.helpers import (
    arm_fault,
    free_port,
    publish_note_script,
    spawn_worker,
    spec,
    start,
    stop_worker,
)
from workers.binaries import temporal_binary
from workers.client import connect
from workers.dev_server import embedded_dev_server_args


class DevServer:
    """`temporal server start-dev` on a SQLite file, which the test can kill and start again."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._command = [
            str(temporal_binary()), "server", "start-dev", "--headless",
            "--ip", "127.0.0.1", "--db-filename", str(workdir / "temporal.db"),
            "--port", str(self.port), "--http-port", str(free_port()),
            "--metrics-port", str(free_port()), "--log-level", "error", *embedded_dev_server_args(),
        ]  # fmt: skip
        self._log = workdir / "temporal.log"
        self._process: subprocess.Popen[bytes] | None = None

    def _spawn(self) -> None:
        with self._log.open("ab") as out:
            self._process = subprocess.Popen(
                self._command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    async def start(self) -> None:
        self._spawn()
        assert self._process is not None
        for _ in range(300):
            assert self._process.poll() is None, self._log.read_text()[-2000:]
            try:
                client = await connect(self.address)
                await client.count_workflows()
                return
            except Exception:
                await asyncio.sleep(0.1)
        raise AssertionError(f"dev server did not start: {self._log.read_text()[-2000:]}")

    def kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(10)


@pytest.fixture
def dev_server(tmp_path: Path) -> Iterator[DevServer]:
    server = DevServer(tmp_path)
    try:
        yield server
    finally:
        server.kill()


async def test_temporal_killed_while_the_target_commits_leaves_one_effect(
    dev_server: DevServer,
    task_queue: str,
    migrated_database: str,
    ledger: EffectLedger,
    tmp_path: Path,
    target_url: str,
) -> None:
    await dev_server.start()
    note_id = f"tk-{hashlib.sha256(task_queue.encode()).hexdigest()[:10]}"
    arguments = {"note_id": note_id, "revision": 1, "content": f"# {note_id}\n\nsurvives\n"}
    key = note_effect_key(arguments)
    script = publish_note_script(tmp_path, arguments)
    fault = {"mode": "hang", "hang_s": 2.0, "times": 1, "key_prefix": key, "method": "POST"}
    arm_fault(target_url, **fault)
    targets = {"notes": {"kind": "http", "base_url": target_url, "timeout_s": 10}}
    log = tmp_path / "worker.log"
    worker = spawn_worker(
        dev_server.address, migrated_database, task_queue, log,
        GROUNDWORK_TARGETS=json.dumps(targets), GROUNDWORK_STICKY_TIMEOUT_S="1",
    )  # fmt: skip
    try:
        client: Client = await connect(dev_server.address)
        run = spec(
            f"scripted:{script}",
            agent="notes-writer",
            timeouts=ActivityTimeouts(tool_call_s=10, heartbeat_s=2, effect_retry_max_s=1),
        )
        await start(client, run, task_queue)
        for _ in range(600):
            record = await ledger.get(key)
            if record is not None and record.status is EffectStatus.DISPATCHING:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the effect was never claimed")
        dev_server.kill()
        await asyncio.sleep(4.0)  # the target answers at ~2 s; the worker cannot report it
        await dev_server.start()
        client = await connect(dev_server.address)
        handle = client.get_workflow_handle(f"run-{run.run_id}", result_type=RunResult)
        result = await asyncio.wait_for(handle.result(), timeout=90)
    finally:
        stop_worker(worker)

    await assert_one_http_effect(result, key, target_url, migrated_database, log)
    # The result the worker could not report was asked for again and the ledger gave it.
    replays = [e for e in log_events(log) if e.get("event") == "effect_already_settled"]
    assert [e.get("effect_key") for e in replays] in ([], [key]), replays
