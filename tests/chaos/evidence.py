"""What the chaos tests count, read from the systems themselves: the ledger's row and events, the worker's own log lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from psycopg_pool import AsyncConnectionPool

from adapters.ledger import EffectLedger
from contracts.effects import EffectRecord, EffectStatus
from contracts.run import RunResult
from contracts.status import RunStatus
from tests.helpers import target_commits


async def ledger_state(
    database_url: str, key: str, run_id: str
) -> tuple[EffectRecord | None, list[dict[str, Any]]]:
    """The effect's row and the run's events about it, through a pool of the test's own."""
    async with AsyncConnectionPool(
        database_url, min_size=1, max_size=1, kwargs={"autocommit": True}
    ) as pool:
        ledger = EffectLedger(pool)
        record = await ledger.get(key)
        events = [e for e in await ledger.events(run_id) if e["effect_key"] == key]
    return record, events


def log_events(log: Path) -> list[dict[str, Any]]:
    """A worker's structlog JSON lines (anything else it printed is skipped)."""
    return [
        json.loads(raw)
        for raw in log.read_text(errors="replace").splitlines()
        if raw.startswith("{")
    ]


async def assert_one_http_effect(
    result: RunResult, key: str, target_url: str, database_url: str, worker_log: Path
) -> EffectRecord:
    """The run completed with the effect committed, the target holds it once, one request
    was ever sent, and the ledger holds it `succeeded` with one domain event."""
    assert result.status is RunStatus.COMPLETED, result
    assert result.final_output is not None
    assert result.final_output.startswith(f"ok: effect {key} committed"), result.final_output
    assert target_commits(target_url, key) == 1
    posts = [
        e
        for e in log_events(worker_log)
        if str(e.get("event", "")).startswith("HTTP Request: POST")
    ]
    assert len(posts) == 1, posts
    record, events = await ledger_state(database_url, key, result.run_id)
    assert record is not None
    assert record.status is EffectStatus.SUCCEEDED
    assert record.external_ref
    assert [e["type"] for e in events] == ["NotePublished"]
    return record
