"""The ledger on real Postgres: claims, fences, conflicts, resolution, append-only history."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import psycopg
import pytest

from adapters.ledger import AlreadySettled, Claimed, EffectLedger, KeyConflict
from contracts.effects import EffectResolution, EffectStatus, PreparedCall, ResolveEffectInput
from contracts.run import EffectClass


def call(key: str, request_hash: str = "h1", run_id: str = "r1") -> PreparedCall:
    return PreparedCall(
        run_id=run_id, agent_name="a", tool_name="t", call_id="c", effect_class=EffectClass.WRITE,
        target="notes", effect_key=key, request_hash=request_hash, arguments={"x": 1},
        deadline=datetime.now(UTC),
    )  # fmt: skip


async def test_zombie_attempt_cannot_settle_over_a_newer_one(ledger: EffectLedger) -> None:
    key = f"k-{uuid.uuid4()}"
    first = await ledger.claim(call(key), activity_attempt=1)
    second = await ledger.claim(call(key), activity_attempt=2)  # Temporal retried: the first hangs
    assert isinstance(first, Claimed)
    assert isinstance(second, Claimed)
    assert second.fence > first.fence
    assert second.previous_status is EffectStatus.DISPATCHING  # so the retry reconciles first
    won = await ledger.settle(key, second.fence, EffectStatus.SUCCEEDED, run_id="r1", activity_attempt=2,
                              external_ref="ref-2", domain_event="EffectCommitted")  # fmt: skip
    assert not won.stale
    zombie = await ledger.settle(key, first.fence, EffectStatus.FAILED, run_id="r1", activity_attempt=1,
                                 error="late", domain_event="EffectCommitted")  # fmt: skip
    assert zombie.stale
    record = await ledger.get(key)
    assert record is not None
    assert record.status is EffectStatus.SUCCEEDED
    assert record.external_ref == "ref-2"
    phases = [(a.phase, a.outcome) for a in await ledger.attempts(key)]
    assert ("settle", "stale_fence_rejected") in phases
    events = [e for e in await ledger.events("r1") if e["effect_key"] == key]
    assert len(events) == 1


async def test_succeeded_returns_receipt_and_conflict_dispatches_nothing(
    ledger: EffectLedger,
) -> None:
    key = f"k-{uuid.uuid4()}"
    claim = await ledger.claim(call(key), 1)
    assert isinstance(claim, Claimed)
    await ledger.settle(
        key, claim.fence, EffectStatus.SUCCEEDED, run_id="r1", activity_attempt=1, external_ref="x"
    )
    again = await ledger.claim(call(key), 2)
    assert isinstance(again, AlreadySettled)
    assert again.record.external_ref == "x"
    other = await ledger.claim(call(key, request_hash="h2"), 3)
    assert isinstance(other, KeyConflict)
    record = await ledger.get(key)
    assert record is not None
    assert record.attempt == 1  # neither the replay nor the conflict claimed a dispatch


async def test_settling_twice_appends_the_domain_event_once(ledger: EffectLedger) -> None:
    key = f"k-{uuid.uuid4()}"
    run_id = f"r-{uuid.uuid4()}"
    claim = await ledger.claim(call(key, run_id=run_id), 1)
    assert isinstance(claim, Claimed)
    for _ in range(2):
        await ledger.settle(key, claim.fence, EffectStatus.SUCCEEDED, run_id=run_id, activity_attempt=1,
                            external_ref="x", domain_event="NotePublished")  # fmt: skip
    assert [e["type"] for e in await ledger.events(run_id)] == ["NotePublished"]


async def test_human_resolution_is_recorded_and_idempotent(ledger: EffectLedger) -> None:
    key = f"k-{uuid.uuid4()}"
    claim = await ledger.claim(call(key), 1)
    assert isinstance(claim, Claimed)
    await ledger.settle(
        key, claim.fence, EffectStatus.REQUIRES_HUMAN, run_id="r1", activity_attempt=1
    )
    answer = ResolveEffectInput(
        effect_key=key,
        resolution=EffectResolution.COMMITTED,
        external_ref="manual-1",
        principal="ops",
    )
    record = await ledger.resolve("r1", answer, "EffectCommitted")
    assert record.status is EffectStatus.SUCCEEDED
    assert record.external_ref == "manual-1"
    assert (await ledger.resolve("r1", answer, "EffectCommitted")).status is EffectStatus.SUCCEEDED


async def test_attempts_and_events_are_append_only(
    ledger: EffectLedger, migrated_database: str
) -> None:
    key = f"k-{uuid.uuid4()}"
    await ledger.claim(call(key), 1)
    async with await psycopg.AsyncConnection.connect(migrated_database, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            await conn.execute(
                "UPDATE effect_attempts SET phase = 'x' WHERE effect_key = %s", (key,)
            )
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            await conn.execute("DELETE FROM run_events")
