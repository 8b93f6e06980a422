"""The trigger service as a real uvicorn process, on real Temporal and real Postgres."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from adapters.ledger import EffectLedger
from contracts.status import RunStatus
from definitions.notes_writer import note_effect_key
from tests.helpers import (
    ROOT,
    arm_fault,
    free_port,
    publish_note_script,
    running_worker,
    spec,
    start,
    target_commits,
)
from tests.integration.test_approvals import APPROVERS

# Generous timeouts: a control waits for the run's update, which waits for activities on a
# loaded 2-core machine.
http = httpx2.Client(timeout=30)
GITHUB_SECRET = "gh-webhook-secret"
TOKENS = {
    "tok-acme": {"tenant": "acme", "principal": "alice", "roles": ["editor"]},
    "tok-globex": {"tenant": "globex", "principal": "hank", "roles": []},
    "tok-ops": {"tenant": "acme", "principal": "olga", "roles": ["operator"]},
    "tok-bob": {"tenant": "acme", "principal": "bob", "roles": ["editor"]},
}
POLICY = """
rules:
  - match: {kind: command, type: "lookup.requested"}
    action: ACTIVATE
    agent: source-reader
    model_route: scripted:source-reader-demo
  - match: {kind: command, type: "note.publish"}
    action: ACTIVATE
    agent: notes-writer
    model_route: scripted:notes-writer-reviewed
  - match: {kind: command, type: "fork.requested"}
    action: FORK
  - match: {kind: event, type: "deploy.*"}
    action: RESUME
default: PROJECT
"""


class TriggerProcess:
    def __init__(self, env: dict[str, str], port: int, log: Path) -> None:
        self.env, self.port, self.log = env, port, log
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, **extra: str) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cli", "serve", "--port", str(self.port)],
                cwd=ROOT, env={**self.env, **extra}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()[-2000:]
            try:
                if http.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx2.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError("trigger service did not come up")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def trigger_env(
    tmp_path_factory: pytest.TempPathFactory,
    temporal_env: WorkflowEnvironment,
    migrated_database: str,
    target_url: str,
) -> dict[str, str]:
    home = tmp_path_factory.mktemp("trigger")
    (home / "policy.yaml").write_text(POLICY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDWORK_")}
    env.update(
        GROUNDWORK_TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
        GROUNDWORK_DATABASE_URL=migrated_database,
        GROUNDWORK_TASK_QUEUE=f"trigger-{uuid.uuid4().hex[:8]}",
        GROUNDWORK_TRIGGER_TOKENS=json.dumps(TOKENS),
        GROUNDWORK_TRIGGER_POLICY=str(home / "policy.yaml"),
        GROUNDWORK_APPROVERS=json.dumps(APPROVERS),
        GROUNDWORK_TARGETS=json.dumps({"notes": {"kind": "http", "base_url": target_url}}),
        GROUNDWORK_HOME=str(home),
        GROUNDWORK_TRIGGER_WEBHOOK_SECRETS=json.dumps({"github": GITHUB_SECRET}),
        GROUNDWORK_TRIGGER_WEBHOOK_TENANT="acme",
    )
    return env


@pytest.fixture(scope="module")
def trigger(
    trigger_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TriggerProcess]:
    proc = TriggerProcess(trigger_env, free_port(), tmp_path_factory.mktemp("tlog") / "trigger.log")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _auth(token: str = "tok-acme") -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _envelope(**overrides: Any) -> dict[str, Any]:
    body = {
        "source_event_id": f"evt-{uuid.uuid4().hex}",
        "kind": "event",
        "type": "ticket.updated",
        "source": "helpdesk",
        "subject": "ticket-1",
        "data": {"status": "open"},
    }
    body.update(overrides)
    return body


def _count_inputs(database_url: str, source_event_id: str | None = None) -> int:
    with psycopg.connect(database_url) as conn:
        if source_event_id is None:
            row = conn.execute("SELECT count(*) FROM inputs").fetchone()
        else:
            row = conn.execute(
                "SELECT count(*) FROM inputs WHERE source_event_id = %s", (source_event_id,)
            ).fetchone()
    assert row is not None
    return int(row[0])


async def _until(check: Any, within_s: float = 20) -> Any:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        value = await asyncio.to_thread(check)
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError("condition not met in time")


def _note_worker(
    client: Client, trigger_env: dict[str, str], migrated_database: str
) -> AbstractAsyncContextManager[Worker]:
    """A worker on the trigger's queue with its note targets and the approvers."""
    return running_worker(
        client, trigger_env["GROUNDWORK_TASK_QUEUE"], migrated_database,
        targets=json.loads(trigger_env["GROUNDWORK_TARGETS"]), approvers=APPROVERS,
    )  # fmt: skip


async def _control(url: str, token: str, body: dict[str, Any]) -> httpx2.Response:
    """POST a control to a run's /controls as `token`'s caller, off the event loop."""
    return await asyncio.to_thread(http.post, url, headers=_auth(token), json=body)


async def _activated(service: TriggerProcess, input_id: str) -> dict[str, Any]:
    """The input's record, once the relay has activated it (it names a run or session)."""
    record: dict[str, Any] = await _until(
        lambda: (
            (r := http.get(f"{service.url}/v1/inputs/{input_id}", headers=_auth()).json())[
                "activation_refs"
            ]
            and r
        )
    )
    return record


async def _note_run_waiting_for_approval(
    trigger: TriggerProcess, body: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """POST a note.publish input as alice; the run it activates, once it waits on its approval."""
    accepted = await asyncio.to_thread(
        http.post, f"{trigger.url}/v1/inputs", json=body, headers=_auth()
    )
    input_id = accepted.json()["input_id"]
    record = await _activated(trigger, input_id)
    run_id = str(record["activation_refs"][0]["run_id"])
    run = await _until(
        lambda: (
            (r := http.get(f"{trigger.url}/v1/runs/{run_id}", headers=_auth()).json()).get(
                "pending_approval"
            )
            and r
        )
    )
    return run_id, run


def test_docs_health_and_auth(trigger: TriggerProcess) -> None:
    assert http.get(f"{trigger.url}/healthz").json() == {"status": "ok"}
    spec = http.get(f"{trigger.url}/openapi.json").json()
    assert "/v1/inputs" in spec["paths"]
    assert http.get(f"{trigger.url}/docs").status_code == 200
    assert http.post(f"{trigger.url}/v1/inputs", json=_envelope()).status_code == 401
    assert (
        http.post(f"{trigger.url}/v1/inputs", json=_envelope(), headers=_auth("nope")).status_code
        == 401
    )


def test_inputs_are_durable_deduplicated_and_conflicts_refused(
    trigger: TriggerProcess, migrated_database: str
) -> None:
    body = _envelope()
    first = http.post(f"{trigger.url}/v1/inputs", json=body, headers=_auth())
    assert first.status_code == 202, first.text
    input_id = first.json()["input_id"]
    again = http.post(f"{trigger.url}/v1/inputs", json=body, headers=_auth())
    assert again.status_code == 200
    assert again.json() == {"input_id": input_id, "duplicate": True}
    changed = http.post(
        f"{trigger.url}/v1/inputs", json={**body, "data": {"status": "closed"}}, headers=_auth()
    )
    assert changed.status_code == 409
    assert input_id in changed.json()["error"]
    assert _count_inputs(migrated_database, body["source_event_id"]) == 1
    record = http.get(f"{trigger.url}/v1/inputs/{input_id}", headers=_auth()).json()
    assert record["principal"] == "alice"  # from the token, never from the payload
    assert record["tenant"] == "acme"


@pytest.mark.parametrize(
    ("content", "headers", "status", "needle"),
    [
        (b"x" * (1024 * 1024 + 1), {"content-type": "application/json"}, 413, "body over"),
        (b"{}", {"content-type": "text/plain"}, 415, "application/json"),
        (
            json.dumps(_envelope(kind="gossip")).encode(),
            {"content-type": "application/json"},
            422,
            "kind",
        ),
        (
            json.dumps(_envelope(tenant="evil")).encode(),
            {"content-type": "application/json"},
            422,
            "tenant",
        ),
        (
            json.dumps(_envelope(kind="control")).encode(),
            {"content-type": "application/json"},
            422,
            "controls",
        ),
        (
            json.dumps(_envelope(kind="command", type="fork.requested")).encode(),
            {"content-type": "application/json"},
            501,
            "FORK",
        ),
    ],
    ids=["too-large", "wrong-type", "bad-kind", "tenant-in-payload", "control-here", "fork"],
)
def test_bad_input_is_a_clear_4xx_and_stores_nothing(
    trigger: TriggerProcess,
    migrated_database: str,
    content: bytes,
    headers: dict[str, str],
    status: int,
    needle: str,
) -> None:
    before = _count_inputs(migrated_database)
    response = http.post(
        f"{trigger.url}/v1/inputs", content=content, headers={**_auth(), **headers}
    )
    assert response.status_code == status, response.text
    assert needle in response.json()["error"]
    assert _count_inputs(migrated_database) == before


def test_tenants_never_see_each_other(trigger: TriggerProcess) -> None:
    input_id = http.post(f"{trigger.url}/v1/inputs", json=_envelope(), headers=_auth()).json()[
        "input_id"
    ]
    assert (
        http.get(f"{trigger.url}/v1/inputs/{input_id}", headers=_auth("tok-globex")).status_code
        == 404
    )
    assert http.get(f"{trigger.url}/v1/inputs/{input_id}", headers=_auth()).status_code == 200
    assert http.get(f"{trigger.url}/v1/inputs/in_nope", headers=_auth()).status_code == 404


async def test_parallel_duplicates_activate_once_and_the_run_is_readable(
    trigger: TriggerProcess, trigger_env: dict[str, str], client: Client, migrated_database: str
) -> None:
    body = _envelope(
        kind="command", type="lookup.requested", data={"text": "Where is RetryPolicy?"}
    )

    async def post() -> int:
        async with httpx2.AsyncClient() as concurrent:
            return (
                await concurrent.post(
                    f"{trigger.url}/v1/inputs", json=body, headers=_auth(), timeout=30
                )
            ).status_code

    statuses = await asyncio.gather(*[post() for _ in range(200)])
    assert sorted(set(statuses)) == [200, 202]
    assert statuses.count(202) == 1
    assert _count_inputs(migrated_database, body["source_event_id"]) == 1
    async with running_worker(client, trigger_env["GROUNDWORK_TASK_QUEUE"], migrated_database):
        input_id = (
            await asyncio.to_thread(
                http.post, f"{trigger.url}/v1/inputs", json=body, headers=_auth()
            )
        ).json()["input_id"]
        record = await _until(
            lambda: (
                (r := http.get(f"{trigger.url}/v1/inputs/{input_id}", headers=_auth()).json())[
                    "disposition"
                ]
                == "ACTIVATE"
                and r
            )
        )
        run_id = record["activation_refs"][0]["run_id"]
        run = await _until(
            lambda: (
                (r := http.get(f"{trigger.url}/v1/runs/{run_id}", headers=_auth()).json()).get(
                    "status"
                )
                == "Completed"
                and r
            )
        )
    assert run["tenant"] == "acme"
    assert len(record["activation_refs"]) == 1
    assert (
        http.get(f"{trigger.url}/v1/runs/{run_id}", headers=_auth("tok-globex")).status_code == 404
    )
    listed = [w async for w in client.list_workflows(f'WorkflowId = "run-{run_id}"')]
    assert len(listed) == 1


async def test_approval_over_http_is_signed_for_the_caller(
    trigger: TriggerProcess, trigger_env: dict[str, str], client: Client, migrated_database: str
) -> None:
    body = _envelope(kind="command", type="note.publish", data={"text": "publish r8"})
    async with _note_worker(client, trigger_env, migrated_database):
        run_id, run = await _note_run_waiting_for_approval(trigger, body)
        pending = run["pending_approval"]
        controls = f"{trigger.url}/v1/runs/{run_id}/controls"
        stored_before_refusals = _count_inputs(migrated_database)
        stale = await _control(
            controls,
            "tok-acme",
            {"action": "approve", "revision": "7", "content_hash": pending["content_hash"]},
        )
        assert stale.status_code == 409
        assert "current revision is 8" in stale.json()["error"]
        unnamed = await _control(controls, "tok-acme", {"action": "approve"})
        assert unnamed.status_code == 422
        not_an_operator = await _control(
            controls,
            "tok-acme",
            {"action": "resolve_effect", "effect_key": "k", "resolution": "not_committed"},
        )
        assert not_an_operator.status_code == 403
        assert not_an_operator.json()["error"] == (
            "alice may not resolve effects: that needs one of the roles operator"
        )
        no_ref = await _control(
            controls,
            "tok-ops",
            {"action": "resolve_effect", "effect_key": "k", "resolution": "committed"},
        )
        assert no_ref.status_code == 422
        assert "external_ref" in no_ref.json()["error"]
        # bob is of the tenant but neither started the run, nor an operator, nor an approver.
        not_his_run = await _control(controls, "tok-bob", {"action": "cancel"})
        assert not_his_run.status_code == 403
        assert not_his_run.json()["error"] == (
            f"bob may not cancel run {run_id}: only who started it (alice) or one of the "
            "roles operator"
        )
        not_an_approver = await _control(controls, "tok-bob", {"action": "revoke"})
        assert not_an_approver.status_code == 403
        assert not_an_approver.json()["error"] == "bob is not an approver"
        assert _count_inputs(migrated_database) == stored_before_refusals  # refused: nothing stored
        # Checked by the run itself (logged, then refused): it waits on an approval, no effect.
        not_waiting = await _control(
            controls,
            "tok-ops",
            {"action": "resolve_effect", "effect_key": "k", "resolution": "not_committed"},
        )
        assert not_waiting.status_code == 409
        assert not_waiting.json()["error"] == (
            "refused: this run is not waiting on effect 'k' (waiting on: none)"
        )
        approved = await _control(
            controls,
            "tok-acme",
            {
                "action": "approve",
                "revision": pending["revision"],
                "content_hash": pending["content_hash"],
            },
        )
        assert approved.status_code == 200, approved.text
        assert approved.json()["message"] == "approved by alice"
        done = await _until(
            lambda: (
                (r := http.get(f"{trigger.url}/v1/runs/{run_id}", headers=_auth()).json()).get(
                    "status"
                )
                == "Completed"
                and r
            )
        )
    assert done["final_output"].startswith("ok: effect")
    events = http.get(f"{trigger.url}/v1/runs/{run_id}/events", headers=_auth()).json()
    assert [e["type"] for e in events["events"]] == ["ApprovalApproved", "NotePublished"]
    first_cursor = events["events"][0]["cursor"]
    page = http.get(
        f"{trigger.url}/v1/runs/{run_id}/events?after={first_cursor}", headers=_auth()
    ).json()
    assert [e["type"] for e in page["events"]] == ["NotePublished"]

    def sse(last_event_id: str | None = None) -> list[tuple[str, str]]:
        headers = {**_auth(), "Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        seen: list[tuple[str, str]] = []
        with httpx2.stream(
            "GET", f"{trigger.url}/v1/runs/{run_id}/events", headers=headers, timeout=20
        ) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            current_id = ""
            for line in stream.iter_lines():
                if line.startswith("id: "):
                    current_id = line[4:]
                elif line.startswith("event: "):
                    seen.append((current_id, line[7:]))
        return seen

    streamed = sse()
    assert [kind for _, kind in streamed] == ["ApprovalApproved", "NotePublished", "end"]
    resumed = sse(last_event_id=streamed[0][0])
    assert [kind for _, kind in resumed] == ["NotePublished", "end"]


async def test_crash_between_commit_and_activation_activates_once_after_restart(
    trigger: TriggerProcess,
    trigger_env: dict[str, str],
    client: Client,
    migrated_database: str,
    tmp_path: Path,
) -> None:
    trigger.stop()  # it would take the outbox row first: relays share the work by design
    proc = TriggerProcess(trigger_env, free_port(), tmp_path / "crashing.log")
    proc.start(GROUNDWORK_CRASH_AT="before_activation")
    body = _envelope(kind="command", type="lookup.requested", data={"text": "crash test"})
    try:
        accepted = http.post(f"{proc.url}/v1/inputs", json=body, headers=_auth())
        assert accepted.status_code == 202
        input_id = accepted.json()["input_id"]
        assert proc.process is not None
        proc.process.wait(20)
        assert proc.process.returncode == -signal.SIGKILL
        proc.start()  # same database: the outbox row is still pending
        record = await _activated(proc, input_id)
    finally:
        proc.stop()
        trigger.start()
    run_id = record["activation_refs"][0]["run_id"]
    listed = [w async for w in client.list_workflows(f'WorkflowId = "run-{run_id}"')]
    assert len(listed) == 1


async def test_crash_after_activation_settles_on_the_run_it_started_even_once_ended(
    trigger: TriggerProcess, trigger_env: dict[str, str], client: Client, migrated_database: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    """The relay dies after starting the run, before the input is settled; the run ends
    before the relay is back. Activating the input again must find that run (closed, so
    Temporal refuses its id) and settle on it, not fail and leave the input pending."""
    trigger.stop()  # it would take the outbox row first: relays share the work by design
    proc = TriggerProcess(trigger_env, free_port(), tmp_path / "crashing.log")
    proc.start(GROUNDWORK_CRASH_AT="after_activation")
    body = _envelope(kind="command", type="lookup.requested", data={"text": "crash after"})
    try:
        async with _note_worker(client, trigger_env, migrated_database):
            accepted = await asyncio.to_thread(
                http.post, f"{proc.url}/v1/inputs", json=body, headers=_auth()
            )
            assert accepted.status_code == 202
            input_id = accepted.json()["input_id"]
            assert proc.process is not None
            await asyncio.to_thread(proc.process.wait, 20)
            assert proc.process.returncode == -signal.SIGKILL
            handle = client.get_workflow_handle(f"run-run-of-{input_id}")
            await handle.result()  # the run it started ends while no relay is up
        proc.start()  # same database: the outbox row is still pending
        record = await _activated(proc, input_id)
    finally:
        proc.stop()
        trigger.start()
    assert record["disposition"] == "ACTIVATE"
    assert record["activation_refs"][0]["run_id"] == f"run-of-{input_id}"
    listed = [w async for w in client.list_workflows(f'WorkflowId = "run-run-of-{input_id}"')]
    assert len(listed) == 1
    assert "activation_failed" not in (tmp_path / "crashing.log").read_text()


def _github(
    trigger: TriggerProcess,
    event: str,
    delivery: str,
    payload: dict[str, Any],
    secret: str = GITHUB_SECRET,
) -> httpx2.Response:
    import hashlib
    import hmac

    body = json.dumps(payload).encode()
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": signature,
               "Content-Type": "application/json"}  # fmt: skip
    return http.post(f"{trigger.url}/v1/webhooks/github", content=body, headers=headers)


def test_github_webhooks_are_verified_normalized_and_deduplicated(
    trigger: TriggerProcess, migrated_database: str
) -> None:
    delivery = str(uuid.uuid4())
    payload = {
        "action": "submitted",
        "repository": {"full_name": "acme/docs"},
        "pull_request": {
            "number": 42,
            "title": "Fix links",
            "head": {"sha": "abc123"},
            "user": {"login": "dev"},
        },
        "review": {"state": "approved", "user": {"login": "lead"}},
    }
    first = _github(trigger, "pull_request_review", delivery, payload)
    assert first.status_code == 202, first.text
    again = _github(trigger, "pull_request_review", delivery, payload)  # GitHub redelivers
    assert again.status_code == 200
    assert again.json()["input_id"] == first.json()["input_id"]
    record = http.get(f"{trigger.url}/v1/inputs/{first.json()['input_id']}", headers=_auth()).json()
    assert record["type"] == "github.pull_request_review.submitted"
    assert record["subject"] == "acme/docs#pr-42"
    assert record["source_event_id"] == delivery
    assert record["data"]["review_state"] == "approved"
    assert record["trust"] == "untrusted"
    before = _count_inputs(migrated_database)
    forged = _github(trigger, "pull_request", str(uuid.uuid4()), payload, secret="guess")
    assert forged.status_code == 401
    unknown = _github(trigger, "deployment", str(uuid.uuid4()), payload)
    assert unknown.status_code == 422
    assert "not handled" in unknown.json()["error"]
    assert _count_inputs(migrated_database) == before


@pytest.mark.parametrize("token", ["tok-acme", "tok-ops"], ids=["who-started-it", "an-operator"])
async def test_a_run_is_cancelled_over_http_by_who_started_it_or_an_operator(
    trigger: TriggerProcess, trigger_env: dict[str, str], client: Client, migrated_database: str,
    token: str,
) -> None:  # fmt: skip
    body = _envelope(kind="command", type="note.publish", data={"text": "publish r8"})
    async with _note_worker(client, trigger_env, migrated_database):
        run_id, waiting = await _note_run_waiting_for_approval(trigger, body)
        assert waiting["principal"] == "alice"
        cancelled = await _control(
            f"{trigger.url}/v1/runs/{run_id}/controls",
            token,
            {"action": "cancel", "reason": "not today"},
        )
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["message"] == "cancellation requested"
        done = await _until(
            lambda: (
                (r := http.get(f"{trigger.url}/v1/runs/{run_id}", headers=_auth()).json())["status"]
                == "Cancelled"
                and r
            )
        )
    assert done["final_output"] is None


async def test_resolve_effect_over_http_and_its_repeat_after_the_run_ended(
    trigger: TriggerProcess, trigger_env: dict[str, str], client: Client, migrated_database: str,
    target_url: str, tmp_path: Path, ledger: EffectLedger,
) -> None:  # fmt: skip
    arguments = {"note_id": f"http-{uuid.uuid4().hex[:8]}", "revision": 1, "content": "lost"}
    key = note_effect_key(arguments)
    # The send is lost before the commit and the target cannot answer lookups: nobody knows.
    arm_fault(target_url, mode="drop_before_commit", times=1, key_prefix=key, method="POST")
    arm_fault(target_url, mode="lookup_unknown", times=-1, key_prefix=key)
    run = spec(
        f"scripted:{publish_note_script(tmp_path, arguments)}", agent="notes-writer", tenant="acme"
    )
    controls = f"{trigger.url}/v1/runs/{run.run_id}/controls"
    answer = {
        "action": "resolve_effect", "effect_key": key, "resolution": "committed",
        "external_ref": "manual-9",
    }  # fmt: skip
    try:
        async with _note_worker(client, trigger_env, migrated_database):
            handle = await start(client, run, trigger_env["GROUNDWORK_TASK_QUEUE"])
            await _until(
                lambda: (
                    http.get(f"{trigger.url}/v1/runs/{run.run_id}", headers=_auth())
                    .json()
                    .get("waiting_reason")
                    == "effect_unknown"
                ),
                within_s=60,
            )
            resolved = await _control(controls, "tok-ops", answer)
            assert resolved.status_code == 200, resolved.text
            assert "ledger succeeded" in resolved.json()["message"]
            assert resolved.json()["input_id"]
            result = await handle.result()
    finally:
        httpx2.delete(f"{target_url}/faults", timeout=5).raise_for_status()
    assert result.status is RunStatus.COMPLETED
    # A client whose response was lost sends the same answer again, after the run ended: the
    # ledger's recorded answer, 200, nothing logged. Another answer is refused with what the
    # ledger holds; the role check still comes first.
    repeat = await _control(controls, "tok-ops", answer)
    assert repeat.status_code == 200, repeat.text
    assert repeat.json() == {
        "accepted": True,
        "message": f"effect {key} was already resolved committed by olga: ledger succeeded; "
        f"run {run.run_id} has ended since",
        "input_id": None,
    }
    other = await _control(controls, "tok-ops", {**answer, "resolution": "abandon"})
    assert other.status_code == 409
    assert other.json()["error"] == (
        f"refused: run {run.run_id} has ended; effect {key} was resolved committed by olga "
        "(ledger succeeded); nothing was changed"
    )
    not_an_operator = await _control(controls, "tok-acme", answer)
    assert not_an_operator.status_code == 403
    assert [a.phase for a in await ledger.attempts(key)].count("resolve") == 1
    assert target_commits(target_url, key) == 0
