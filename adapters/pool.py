"""The Postgres connection pool the worker and the trigger service share their stores through.

psycopg_pool hands out the connection that has been idle longest (its deque is popped at
the left and refilled at the right). On a small VM a backend's first commit after an idle
gap is slow: a fsynced one-row INSERT took 0.36 ms back to back and 1.59 ms after 50 ms
asleep, and a second commit right after a first took 0.69 ms on the same connection
against 1.19 ms on one idle for ~100 ms (bench/RESULTS.md, 2026-12-03 evening). A
ledger dispatch commits twice in a row (claim, then settle), so a pool that hands the
coldest backend to each of them pays that gap twice. This one hands out the connection
returned last; the longest-idle ones sit at the other end, which is also where the pool
shrinks from, so connections a quiet worker no longer needs do get closed.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool


class RecentFirstPool(AsyncConnectionPool[AsyncConnection[Any]]):
    """An AsyncConnectionPool that reuses the most recently returned connection first."""

    async def _get_ready_connection(
        self,
        timeout: float | None,  # noqa: ASYNC109 (psycopg_pool's own signature)
    ) -> AsyncConnection[Any] | None:
        # Overrides a private method of psycopg_pool 3.3 (pinned <3.4 in pyproject.toml);
        # tests/integration/test_pool.py fails if the order or the bookkeeping changes.
        if self._pool and (timeout is None or timeout > 0.0):
            conn = self._pool.pop()
            if len(self._pool) < self._nconns_min:
                self._nconns_min = len(self._pool)
            return conn
        return await super()._get_ready_connection(timeout)


def new_pool(
    database_url: str, *, min_size: int, max_size: int, wait_s: float = 30.0
) -> RecentFirstPool:
    """An unopened autocommit pool: every store opens its own transactions.

    `wait_s` bounds how long a caller waits for a connection; while the database restarts
    the pool keeps reconnecting in the background and a waiting caller gets the first one.
    """
    return RecentFirstPool(
        database_url,
        min_size=min_size,
        max_size=max_size,
        timeout=wait_s,
        open=False,
        kwargs={"autocommit": True},
    )
