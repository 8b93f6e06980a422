"""Concurrent claims and settles share one statement on real Postgres, and mean what the
same calls made one by one would: one fence per claim, stale fences refused, a conflict or a
missing row answered to its own caller only, one domain event per effect."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from adapters.ledger import AlreadySettled, Claimed, EffectLedger, KeyConflict, LedgerError
from contracts.effects import EffectStatus
from tests.integration.test_ledger import call


@pytest.fixture
def one_slot(ledger_pool: AsyncConnectionPool) -> EffectLedger:
    """One statement at a time: while the first call is in flight every other one, claim or
    settle, queues, so a gather of N calls is one lone call followed by one batch of N - 1."""
    return EffectLedger(ledger_pool, batch_slots=1)


async def _rows(database_url: str, sql: str, *args: object) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(sql, args)
        return list(await cur.fetchall())


async def test_concurrent_claims_and_settles_share_a_statement(
    one_slot: EffectLedger, migrated_database: str
) -> None:
    run_id = f"r-{uuid.uuid4()}"
    keys = [f"k-{uuid.uuid4()}" for _ in range(6)]
    claims = await asyncio.gather(*(one_slot.claim(call(k, run_id=run_id), 1) for k in keys))
    assert one_slot.batches == 1
    assert all(isinstance(c, Claimed) and c.fence == 1 for c in claims)
    settled = await asyncio.gather(
        *(
            one_slot.settle(k, 1, EffectStatus.SUCCEEDED, run_id=run_id, activity_attempt=1,
                            external_ref=f"ref-{k}", receipt={"n": i}, domain_event="NotePublished")
            for i, k in enumerate(keys)
        )
    )  # fmt: skip
    assert one_slot.batches == 2
    assert [s.record.effect_key for s in settled] == keys  # each caller got its own row
    assert all(not s.stale and s.record.status is EffectStatus.SUCCEEDED for s in settled)
    assert [s.record.receipt for s in settled] == [{"n": i} for i in range(len(keys))]
    stored = await _rows(
        migrated_database,
        "SELECT effect_key, status, external_ref, request FROM effects WHERE run_id = %s",
        run_id,
    )
    assert {(k, "succeeded", f"ref-{k}") for k in keys} == {r[:3] for r in stored}
    assert all(r[3] == {"tool": "t", "arguments": {"x": 1}} for r in stored)
    events = await one_slot.events(run_id)
    assert sorted(e["effect_key"] for e in events) == sorted(keys)
    phases = await _rows(
        migrated_database,
        "SELECT phase, count(*) FROM effect_attempts WHERE effect_key = ANY(%s) GROUP BY phase",
        keys,
    )
    assert dict(phases) == {"claim": 6, "settle": 6}


async def test_claims_and_settles_that_arrive_together_share_one_statement(
    one_slot: EffectLedger, migrated_database: str
) -> None:
    run_id = f"r-{uuid.uuid4()}"
    settling, zombie, fresh = (f"k-{uuid.uuid4()}" for _ in range(3))
    await one_slot.claim(call(settling, run_id=run_id), 1)
    await one_slot.claim(call(zombie, run_id=run_id), 1)
    reclaimed = await one_slot.claim(call(zombie, run_id=run_id), 2)  # fence 2 owns it now
    assert isinstance(reclaimed, Claimed)
    assert one_slot.batches == 0
    opener, done, late, new, again = await asyncio.gather(
        one_slot.claim(call(f"k-{uuid.uuid4()}", run_id=run_id), 1),  # holds the slot
        one_slot.settle(settling, 1, EffectStatus.SUCCEEDED, run_id=run_id, activity_attempt=1,
                        external_ref="ref-1", domain_event="NotePublished"),
        one_slot.settle(zombie, 1, EffectStatus.SUCCEEDED, run_id=run_id, activity_attempt=1,
                        external_ref="ref-late", domain_event="NotePublished"),
        one_slot.claim(call(fresh, run_id=run_id), 1),
        one_slot.claim(call(settling, run_id=run_id), 2),  # after its settle, in arrival order
    )  # fmt: skip
    assert one_slot.batches == 1  # the four after the opener: two settles, two claims
    assert isinstance(opener, Claimed)
    assert not done.stale
    assert done.record.status is EffectStatus.SUCCEEDED
    assert late.stale  # the re-claim's fence owns the row; the late settle changed nothing
    assert (late.record.fence, late.record.status) == (2, EffectStatus.DISPATCHING)
    assert isinstance(new, Claimed)
    assert new.fence == 1
    assert isinstance(again, AlreadySettled)  # the settle ahead of it in the batch committed
    assert again.record.status is EffectStatus.SUCCEEDED
    events = await one_slot.events(run_id)
    assert [(e["effect_key"], e["data"]["external_ref"]) for e in events] == [(settling, "ref-1")]
    outcomes = await _rows(
        migrated_database,
        "SELECT outcome FROM effect_attempts WHERE effect_key = %s AND phase = 'settle'",
        zombie,
    )
    assert outcomes == [("stale_fence_rejected",)]


async def test_a_failed_mixed_batch_is_rolled_back_whole_and_each_claim_runs_once(
    one_slot: EffectLedger, migrated_database: str
) -> None:
    run_id = f"r-{uuid.uuid4()}"
    fresh = f"k-{uuid.uuid4()}"
    # The missing row's settle fails the shared statement, claim included; the claim then
    # runs alone. Had the failed statement kept its claim, the retry would be a re-claim.
    _, missing, claimed = await asyncio.gather(
        one_slot.claim(call(f"k-{uuid.uuid4()}", run_id=run_id), 1),  # holds the slot
        one_slot.settle("never-claimed", 1, EffectStatus.SUCCEEDED, run_id=run_id,
                        activity_attempt=1),
        one_slot.claim(call(fresh, run_id=run_id), 1),
        return_exceptions=True,
    )  # fmt: skip
    assert one_slot.batches == 1
    assert isinstance(missing, LedgerError)
    assert isinstance(claimed, Claimed)
    assert (claimed.fence, claimed.previous_status) == (1, EffectStatus.PREPARED)
    attempts = await _rows(
        migrated_database,
        "SELECT phase, outcome FROM effect_attempts WHERE effect_key = %s",
        fresh,
    )
    assert attempts == [("claim", "dispatching")]


async def test_the_same_key_twice_in_a_batch_is_two_claims_in_order(
    one_slot: EffectLedger,
) -> None:
    run_id = f"r-{uuid.uuid4()}"
    opener, key = f"k-{uuid.uuid4()}", f"k-{uuid.uuid4()}"
    _, first, second = await asyncio.gather(
        one_slot.claim(call(opener, run_id=run_id), 1),  # holds the slot: the two queue
        one_slot.claim(call(key, run_id=run_id), 1),
        one_slot.claim(call(key, run_id=run_id), 2),
    )
    assert one_slot.batches == 1
    assert isinstance(first, Claimed)
    assert isinstance(second, Claimed)
    assert (first.fence, second.fence) == (1, 2)
    assert second.previous_status is EffectStatus.DISPATCHING  # so that attempt reconciles
    zombie = await one_slot.settle(key, first.fence, EffectStatus.FAILED, run_id=run_id,
                                   activity_attempt=1, error="late")  # fmt: skip
    assert zombie.stale  # the second claim holds the current fence
    won = await one_slot.settle(key, second.fence, EffectStatus.SUCCEEDED, run_id=run_id,
                                activity_attempt=2, external_ref="x", domain_event="NotePublished")  # fmt: skip
    assert not won.stale
    assert [e["effect_key"] for e in await one_slot.events(run_id)] == [key]


async def test_a_conflict_or_a_missing_row_is_its_own_callers_answer(
    one_slot: EffectLedger,
) -> None:
    run_id = f"r-{uuid.uuid4()}"
    taken, fresh = f"k-{uuid.uuid4()}", f"k-{uuid.uuid4()}"
    await one_slot.claim(call(taken, run_id=run_id), 1)
    _, conflict, claimed = await asyncio.gather(
        one_slot.claim(call(f"k-{uuid.uuid4()}", run_id=run_id), 1),
        one_slot.claim(call(taken, request_hash="other", run_id=run_id), 1),
        one_slot.claim(call(fresh, run_id=run_id), 1),
    )
    assert isinstance(conflict, KeyConflict)
    assert isinstance(claimed, Claimed)
    # A settle for a key the ledger never saw fails its batch; the batch is then run item by
    # item, so only that caller sees the error and the others settle.
    results = await asyncio.gather(
        one_slot.settle(taken, 1, EffectStatus.SUCCEEDED, run_id=run_id, activity_attempt=1),
        one_slot.settle("never-claimed", 1, EffectStatus.SUCCEEDED, run_id=run_id,
                        activity_attempt=1),
        one_slot.settle(fresh, 1, EffectStatus.SUCCEEDED, run_id=run_id, activity_attempt=1,
                        external_ref="y", domain_event="NotePublished"),
        return_exceptions=True,
    )  # fmt: skip
    assert one_slot.batches == 2
    assert isinstance(results[1], LedgerError)
    assert "never-claimed" in str(results[1])
    assert not isinstance(results[2], BaseException)
    assert results[2].record.status is EffectStatus.SUCCEEDED
    assert [e["effect_key"] for e in await one_slot.events(run_id)] == [fresh]


async def test_a_receipt_that_is_not_json_fails_only_its_own_settle(
    one_slot: EffectLedger,
) -> None:
    run_id = f"r-{uuid.uuid4()}"
    keys = [f"k-{uuid.uuid4()}" for _ in range(3)]
    await asyncio.gather(*(one_slot.claim(call(k, run_id=run_id), 1) for k in keys))
    results = await asyncio.gather(
        *(
            one_slot.settle(k, 1, EffectStatus.SUCCEEDED, run_id=run_id, activity_attempt=1,
                            receipt={"bad": object()} if i == 1 else {"n": i})
            for i, k in enumerate(keys)
        ),
        return_exceptions=True,
    )  # fmt: skip
    assert one_slot.batches == 2
    assert isinstance(results[1], TypeError)  # dumped in the worker: nothing reached Postgres
    assert [r.record.receipt for r in (results[0], results[2])] == [{"n": 0}, {"n": 2}]  # type: ignore[union-attr]
    record = await one_slot.get(keys[1])
    assert record is not None
    assert record.status is EffectStatus.DISPATCHING  # its retry reconciles before sending
