"""Calls that arrive together share one round trip: natural batching, no timer.

A call that finds a free slot runs at once, alone, exactly as it would without a batcher.
Calls that arrive while every slot is busy wait, and the next slot to free up takes all of
them (up to `max_batch`) as one batch. So a lone caller never waits for company, and under
load the number of round trips (and commits) follows the number of slots, not of callers.

A batch that fails is run again item by item, so each caller gets its own answer or its own
error, as if it had called alone; except for an error `every_callers(err)` says each of them
would have got alone anyway (the database is away), which goes to all of them at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class Batcher(Generic[Item, Result]):
    def __init__(
        self,
        run: Callable[[Sequence[Item]], Awaitable[Sequence[Result]]],
        *,
        every_callers: Callable[[Exception], bool],
        slots: int = 2,
        max_batch: int = 64,
    ) -> None:
        """`run(items)` returns one result per item, in order; `slots` batches run at once."""
        if slots < 1 or max_batch < 1:
            raise ValueError("slots and max_batch must be at least 1")
        self._run = run
        self._every_callers = every_callers
        self._slots = slots
        self._max_batch = max_batch
        self._busy = 0
        self._waiting: list[tuple[Item, asyncio.Future[Result]]] = []
        self._flushing: set[asyncio.Task[None]] = set()
        self.batches = 0
        """How many multi-item batches ran (for benchmarks and tests)."""
        self.runs = 0
        self.items = 0
        """How many times `run` was called, and with how many items in all (for benchmarks)."""

    async def submit(self, item: Item) -> Result:
        if self._busy < self._slots and not self._waiting:
            self._busy += 1  # the uncontended path: no future, no task, no extra loop hop
            try:
                return (await self._call([item]))[0]
            finally:
                self._release()
        done: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, done))
        return await done

    async def _call(self, items: Sequence[Item]) -> Sequence[Result]:
        self.runs += 1
        self.items += len(items)
        results = await self._run(items)
        if len(results) != len(items):
            raise RuntimeError(f"batch of {len(items)} returned {len(results)} results")
        return results

    def _release(self) -> None:
        self._busy -= 1
        if self._waiting and self._busy < self._slots:
            batch = self._waiting[: self._max_batch]
            del self._waiting[: self._max_batch]
            self._busy += 1
            task = asyncio.create_task(self._flush(batch))
            self._flushing.add(task)  # the loop keeps only weak references to tasks
            task.add_done_callback(self._flushing.discard)

    async def _flush(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        try:
            items = [item for item, _ in batch]
            if len(batch) > 1:
                self.batches += 1
            try:
                outcomes: Sequence[Result | BaseException] = await self._call(items)
            except Exception as err:
                if len(batch) == 1 or self._every_callers(err):
                    raise
                # One item's error must not become its neighbours' error.
                alone = await asyncio.gather(
                    *(self._call([item]) for item in items), return_exceptions=True
                )
                outcomes = [o if isinstance(o, BaseException) else o[0] for o in alone]
            for (_, done), outcome in zip(batch, outcomes, strict=True):
                if done.done():
                    continue
                if isinstance(outcome, BaseException):
                    done.set_exception(outcome)
                else:
                    done.set_result(outcome)
        except BaseException as err:
            for _, done in batch:
                if not done.done():
                    if isinstance(err, asyncio.CancelledError):
                        done.cancel()
                    else:
                        done.set_exception(err)
            if not isinstance(err, Exception):
                raise
        finally:
            self._release()
