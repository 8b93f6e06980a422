"""adapters.batcher: who runs alone, who waits, and whose error is whose."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import psycopg
import pytest

from adapters.batcher import Batcher
from adapters.ledger import database_away


class Recorder:
    def __init__(
        self, fail_on: int | None = None, away: bool = False, deadlock: bool = False
    ) -> None:
        self.calls: list[list[int]] = []
        self.fail_on = fail_on
        self.away = away
        self.deadlock = deadlock

    async def run(self, items: Sequence[int]) -> list[int]:
        self.calls.append(list(items))
        await asyncio.sleep(0.01)
        if self.away:
            raise psycopg.OperationalError("connection refused")
        if self.deadlock and len(items) > 1:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        if self.fail_on in items:
            raise ValueError(f"bad item {self.fail_on}")
        return [i * 10 for i in items]


async def test_a_lone_call_runs_at_once_and_alone() -> None:
    rec = Recorder()
    batcher = Batcher(rec.run, every_callers=database_away, slots=2)
    assert await batcher.submit(1) == 10
    assert await batcher.submit(2) == 20
    assert rec.calls == [[1], [2]]
    assert batcher.batches == 0


async def test_calls_queued_behind_busy_slots_go_together_in_order() -> None:
    rec = Recorder()
    batcher = Batcher(rec.run, every_callers=database_away, slots=2, max_batch=4)
    assert await asyncio.gather(*(batcher.submit(i) for i in range(8))) == [
        i * 10 for i in range(8)
    ]
    assert rec.calls[:2] == [[0], [1]]  # the two slots, each taken by a lone call
    assert rec.calls[2:] == [[2, 3, 4, 5], [6, 7]]  # then what queued, max_batch at a time
    assert batcher.batches == 2


async def test_one_items_error_is_not_its_neighbours() -> None:
    rec = Recorder(fail_on=3)
    batcher = Batcher(rec.run, every_callers=database_away, slots=1)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(5)), return_exceptions=True)
    assert results[:3] == [0, 10, 20]
    assert isinstance(results[3], ValueError)
    assert results[4] == 40
    assert rec.calls == [[0], [1, 2, 3, 4], [1], [2], [3], [4]]  # the batch, then one by one


async def test_the_database_away_is_every_callers_error_without_retrying() -> None:
    rec = Recorder(away=True)
    batcher = Batcher(rec.run, every_callers=database_away, slots=1)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(4)), return_exceptions=True)
    assert all(isinstance(r, psycopg.OperationalError) for r in results)
    assert rec.calls == [[0], [1, 2, 3]]


async def test_a_rolled_back_batch_is_run_again_item_by_item() -> None:
    # A deadlock is an OperationalError in psycopg, but not the database being away: alone,
    # each item goes through.
    rec = Recorder(deadlock=True)
    batcher = Batcher(rec.run, every_callers=database_away, slots=1)
    assert await asyncio.gather(*(batcher.submit(i) for i in range(3))) == [0, 10, 20]
    assert rec.calls == [[0], [1, 2], [1], [2]]


async def test_a_cancelled_waiter_does_not_stop_the_batch() -> None:
    rec = Recorder()
    batcher = Batcher(rec.run, every_callers=database_away, slots=1)
    first = asyncio.ensure_future(batcher.submit(0))
    await asyncio.sleep(0)
    waiters = [asyncio.ensure_future(batcher.submit(i)) for i in (1, 2)]
    await asyncio.sleep(0)
    waiters[0].cancel()
    assert await first == 0
    assert await waiters[1] == 20
    assert rec.calls == [[0], [1, 2]]


def test_the_ledger_tells_the_database_away_from_a_rolled_back_batch() -> None:
    assert database_away(psycopg.OperationalError("connection refused"))  # no SQLSTATE
    assert database_away(psycopg.errors.AdminShutdown())
    assert not database_away(psycopg.errors.DeadlockDetected())
    assert not database_away(psycopg.errors.SerializationFailure())
    assert not database_away(psycopg.errors.LockNotAvailable())
    assert not database_away(ValueError("bad item"))


def test_slots_and_batch_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Batcher(Recorder().run, every_callers=database_away, slots=0)
