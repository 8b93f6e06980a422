"""Heartbeat while awaiting something slow, so a dead worker is noticed by heartbeat timeout."""

from __future__ import annotations

import asyncio
from types import TracebackType

from temporalio import activity


class heartbeating:  # lower case: used as `async with heartbeating():`, as it was a function
    """Heartbeat every third of the activity's heartbeat timeout while the block runs.

    The first beat comes after one interval, not at the start: the server counts the
    heartbeat timeout from the start, and most calls end well inside a third of it, so they
    send no heartbeat at all (one at the start cost ~1 ms per activity in bench/effects.py's
    overhead pairs). The beats are loop timers rather than a task: a task per activity, made
    and cancelled on every dispatch, cost ~30 us of the ledger's CPU per effect.
    """

    def __init__(self) -> None:
        self._handle: asyncio.TimerHandle | None = None

    async def __aenter__(self) -> None:
        timeout = activity.info().heartbeat_timeout
        if not timeout:
            return
        self._loop = asyncio.get_running_loop()
        self._interval = max(timeout.total_seconds() / 3, 0.1)
        # call_later runs the callback in a copy of this context: activity.heartbeat() finds
        # the running activity as it would inside the activity's own task.
        self._handle = self._loop.call_later(self._interval, self._beat)

    def _beat(self) -> None:
        activity.heartbeat()
        self._handle = self._loop.call_later(self._interval, self._beat)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
