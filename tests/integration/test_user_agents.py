"""An agent of the user's own package, loaded by GROUNDWORK_AGENTS, runs like a built-in one:
a real `groundwork worker` process serves it, its governed tool goes through the ledger to a
real target, the CLI lists it, and a wrong entry stops the process at start with one line."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from contracts.effects import EffectStatus
from contracts.run import EffectClass, RunSpec
from contracts.status import RunStatus
from definitions import catalog
from tests.chaos.evidence import ledger_state
from tests.helpers import (
    ROOT,
    cli_env,
    spawn_worker,
    spec,
    start,
    stop_worker,
    target_commits,
    write_script,
)
from tests.user_agents import receipt_key

# The catalog name need not be the Agent's own name ("receipt-sender"): runs name the former.
AGENTS = {"billing-receipts": "tests.user_agents:build_receipt_sender"}


def gw(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = cli_env(**env)
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


async def test_a_worker_serves_an_agent_named_in_GROUNDWORK_AGENTS(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, migrated_database: str,
    tmp_path: Path, target_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(catalog, "_loaded", {})
    catalog.load(AGENTS)  # the starting side pins the agent's policy, as `run start` does
    order = f"o-{task_queue[-8:]}"
    arguments = {"order_id": order, "email": "buyer@example.com"}
    key = receipt_key(arguments)
    script = write_script(
        tmp_path,
        [
            {"tool_calls": [{"name": "order_total", "arguments": {"order_id": order}}]},
            {"tool_calls": [{"name": "send_receipt", "arguments": arguments}]},
            {"text": "{{last_tool_output}}"},
        ],
    )
    targets = {"receipts": {"kind": "http", "base_url": target_url}}
    log = tmp_path / "worker.log"
    worker = spawn_worker(
        temporal_env.client.service_client.config.target_host, migrated_database, task_queue,
        log, GROUNDWORK_AGENTS=json.dumps(AGENTS), GROUNDWORK_TARGETS=json.dumps(targets),
    )  # fmt: skip
    try:
        run = spec(f"scripted:{script}", agent="billing-receipts")
        handle = await start(client, run, task_queue)
        result = await asyncio.wait_for(handle.result(), timeout=60)
    finally:
        stop_worker(worker)

    assert result.status is RunStatus.COMPLETED, (result, log.read_text()[-2000:])
    assert result.final_output is not None
    assert result.final_output.startswith(f"ok: effect {key} committed"), result.final_output
    assert target_commits(target_url, key) == 1
    record, events = await ledger_state(migrated_database, key, run.run_id)
    assert record is not None
    assert record.status is EffectStatus.SUCCEEDED
    assert record.effect_class is EffectClass.IDEMPOTENT_WRITE
    assert [e["type"] for e in events] == ["ReceiptSent"]
    started = await anext(aiter(handle.fetch_history_events()))
    payload = started.workflow_execution_started_event_attributes.input.payloads[0].data
    pinned = RunSpec.model_validate_json(payload).policy
    assert pinned["send_receipt"].effect_class is EffectClass.IDEMPOTENT_WRITE
    assert pinned["order_total"].effect_class is EffectClass.READ


def test_a_wrong_entry_stops_the_worker_at_start_with_one_line(
    temporal_env: WorkflowEnvironment, migrated_database: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    worker = spawn_worker(
        temporal_env.client.service_client.config.target_host, migrated_database, "never-polled",
        log, GROUNDWORK_AGENTS=json.dumps({"receipt-sender": "tests.user_agents:not_an_agent"}),
    )  # fmt: skip
    try:
        code = worker.wait(timeout=60)
    finally:
        stop_worker(worker)
    assert code == 1
    lines = log.read_text().strip().splitlines()
    assert lines == [
        "error: GROUNDWORK_AGENTS: agent 'receipt-sender': tests.user_agents:not_an_agent() "
        "returned str, not an agents.Agent"
    ], lines


def test_agent_list_shows_loaded_agents_and_refuses_an_ungovernable_one() -> None:
    listed = gw("agent", "list", "--json", GROUNDWORK_AGENTS=json.dumps(AGENTS))
    assert listed.returncode == 0, listed.stderr
    rows = {row["agent"]: row for row in json.loads(listed.stdout)}
    assert rows["billing-receipts"]["source"] == AGENTS["billing-receipts"]
    assert rows["billing-receipts"]["tools"]["send_receipt"]["effect_class"] == "idempotent_write"
    assert rows["notes-writer"]["source"] == "built-in"

    hosted = gw(
        "agent", "list",
        GROUNDWORK_AGENTS=json.dumps({"searcher": "tests.user_agents:with_hosted_tool"}),
    )  # fmt: skip
    assert hosted.returncode == 1
    assert hosted.stdout == ""
    assert hosted.stderr.startswith("error: GROUNDWORK_AGENTS: agent 'searcher' has tool")
    assert "accepts only function tools" in hosted.stderr
    assert len(hosted.stderr.strip().splitlines()) == 1

    malformed = gw("agent", "list", GROUNDWORK_AGENTS="receipt-sender")
    assert malformed.returncode == 1
    assert "invalid GROUNDWORK_* configuration" in malformed.stderr
