"""Heartbeat while awaiting something slow, so a dead worker is noticed by heartbeat timeout."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from temporalio import activity


@asynccontextmanager
async def heartbeating() -> AsyncIterator[None]:
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        yield
        return
    interval = max(timeout.total_seconds() / 3, 0.1)

    async def beat() -> None:
        # Sleep first: the server counts the heartbeat timeout from the start, and most calls
        # end well inside a third of it, so they send no heartbeat at all. A heartbeat at
        # the start cost ~1 ms per activity (bench/effects.py, overhead pairs).
        while True:
            await asyncio.sleep(interval)
            activity.heartbeat()

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
