"""Schemathesis against the live service's /openapi.json: every operation, generated valid and
invalid requests, on a real uvicorn process, real Postgres and real Temporal.

Checked for every request: no 5xx, and a request answered 4xx stored nothing (the inputs
table has as many rows after it as before). Bounded: a fixed number of examples per
generation mode, no shrinking of passing runs, no example database.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.core.result import Ok
from temporalio.client import Client

from contracts.run import RunState
from contracts.status import RunStatus
from tests.helpers import free_port, running_worker, spec, start, write_script
from tests.integration.test_trigger import (
    TriggerProcess,
    trigger_env,  # noqa: F401  (a fixture this module uses)
)

EXAMPLES = 300  # per pass, over all operations together


@pytest.fixture(scope="module")
def service(
    trigger_env: dict[str, str],  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[TriggerProcess]:
    proc = TriggerProcess(
        trigger_env, free_port(), tmp_path_factory.mktemp("schema") / "trigger.log"
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _count(conn: psycopg.Connection[tuple[int]]) -> int:
    row = conn.execute("SELECT count(*) FROM inputs").fetchone()
    assert row is not None
    return int(row[0])


def _fuzz(
    service: TriggerProcess,
    database_url: str,
    mode: GenerationMode,
    path_parameters: dict[str, str] | None = None,
) -> dict[str, set[int]]:
    schema = schemathesis.openapi.from_url(f"{service.url}/openapi.json")
    operations = [r.ok() for r in schema.get_all_operations() if isinstance(r, Ok)]
    assert {f"{op.method.upper()} {op.path}" for op in operations} >= {
        "POST /v1/inputs",
        "GET /v1/inputs/{input_id}",
        "GET /v1/runs/{run_id}",
        "GET /v1/runs/{run_id}/events",
        "POST /v1/runs/{run_id}/controls",
        "POST /v1/webhooks/github",
    }
    session = requests.Session()
    headers = {"Authorization": "Bearer tok-acme"}
    seen: dict[str, set[int]] = {}
    failures: list[str] = []
    started = time.monotonic()

    with psycopg.connect(database_url, autocommit=True) as conn:

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=schema.as_strategy(generation_mode=mode, path_parameters=path_parameters))
        def check(case: Any) -> None:
            before = _count(conn)
            response = case.call(base_url=service.url, session=session, headers=headers, timeout=30)
            key = f"{case.method.upper()} {case.operation.path}"
            seen.setdefault(key, set()).add(response.status_code)
            if response.status_code >= 500:
                failures.append(
                    f"{response.status_code} {key}: {response.text[:300]}\n  {case.as_curl_command()}"
                )
            elif 400 <= response.status_code < 500:
                after = _count(conn)
                if after != before:
                    failures.append(f"{response.status_code} {key} stored {after - before} row(s)")

        check()

    print(
        f"{mode.value} {path_parameters or ''}: {time.monotonic() - started:.1f} s, statuses: {seen}"
    )
    assert not failures, "\n".join(failures[:10])
    return seen


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_5xx_and_rejected_requests_store_nothing(
    service: TriggerProcess, migrated_database: str, mode: GenerationMode
) -> None:
    seen = _fuzz(service, migrated_database, mode)
    # Positive cases reach every operation; negative ones only those with something to break
    # (a body, a query parameter).
    assert len(seen) >= (7 if mode is GenerationMode.POSITIVE else 3), seen


async def test_the_same_against_a_live_run_and_a_stored_input(
    service: TriggerProcess,
    trigger_env: dict[str, str],  # noqa: F811
    client: Client,
    migrated_database: str,
    tmp_path: Path,
) -> None:
    """Path parameters naming a real run (waiting, worker up) and a real input, so the
    handlers behind the 404 are reached too: controls refused by state, event pages, etc."""
    wait = {"name": "wait_for_event", "arguments": {"type": "never.happens", "subject": "x", "timeout_s": 600}}  # fmt: skip
    script = write_script(tmp_path, [{"tool_calls": [wait]}, {"text": "done"}])
    run = spec(f"scripted:{script}", agent="watcher", tenant="acme")
    task_queue = trigger_env["GROUNDWORK_TASK_QUEUE"]
    async with running_worker(client, task_queue, migrated_database):
        handle = await start(client, run, task_queue)
        for _ in range(400):
            state: RunState = await handle.query("get_state", result_type=RunState)
            if state.status is RunStatus.WAITING:
                break
            await asyncio.sleep(0.05)
        posted = await asyncio.to_thread(
            requests.post,
            f"{service.url}/v1/inputs",
            json={"source_event_id": f"evt-{uuid.uuid4().hex}", "kind": "event", "type": "t.x",
                  "source": "schema", "subject": "s"},
            headers={"Authorization": "Bearer tok-acme"},
            timeout=30,
        )  # fmt: skip
        assert posted.status_code == 202, posted.text
        params = {"run_id": run.run_id, "input_id": posted.json()["input_id"]}
        seen = await asyncio.to_thread(
            _fuzz, service, migrated_database, GenerationMode.POSITIVE, params
        )
        with contextlib.suppress(Exception):
            await handle.terminate("test over")
    assert 200 in seen["GET /v1/runs/{run_id}"], seen
    assert 200 in seen["GET /v1/inputs/{input_id}"], seen
    assert seen["POST /v1/runs/{run_id}/controls"] - {404}, seen
