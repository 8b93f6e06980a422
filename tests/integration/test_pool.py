"""The worker's pool reuses the connection returned last, on a real Postgres.

Identity is the backend's pid, so the test reads what Postgres saw, not the pool's insides.
psycopg_pool's own pool is checked too: if it ever stops handing out the longest-idle
connection, RecentFirstPool's reason to exist is gone and this test says so.
"""

from __future__ import annotations

import asyncio
from typing import Any

from psycopg_pool import AsyncConnectionPool

from adapters.pool import new_pool


async def _pid(pool: AsyncConnectionPool[Any]) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT pg_backend_pid()")
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def _order_after_two_returns(pool: AsyncConnectionPool[Any]) -> tuple[int, int, int]:
    """Hold two connections, give back A then B, and ask for one: whose backend is it?"""
    a = await pool.getconn()
    b = await pool.getconn()
    pid_a, pid_b = a.pgconn.backend_pid, b.pgconn.backend_pid
    await pool.putconn(a)
    await pool.putconn(b)
    return pid_a, pid_b, await _pid(pool)


async def test_recent_first_pool_hands_out_the_connection_returned_last(
    migrated_database: str,
) -> None:
    pool = new_pool(migrated_database, min_size=2, max_size=2)
    await pool.open(wait=True, timeout=30)
    try:
        pid_a, pid_b, next_pid = await _order_after_two_returns(pool)
        assert pid_a != pid_b
        assert next_pid == pid_b
        # Sequential use keeps landing on that one warm backend.
        assert {await _pid(pool) for _ in range(5)} == {pid_b}
        # Waiting clients are still served when every connection is out.
        held = [await pool.getconn(), await pool.getconn()]
        waiter = asyncio.create_task(_pid(pool))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        await pool.putconn(held.pop())
        assert await asyncio.wait_for(waiter, 5) in {pid_a, pid_b}
        await pool.putconn(held.pop())
        stats = pool.get_stats()
        assert stats["pool_size"] == 2
        assert stats["pool_available"] == 2
        conn = await pool.getconn()
        assert conn.autocommit  # the stores open their own transactions
        await pool.putconn(conn)
    finally:
        await pool.close()


async def test_psycopg_pool_itself_hands_out_the_longest_idle_connection(
    migrated_database: str,
) -> None:
    async with AsyncConnectionPool(migrated_database, min_size=2, max_size=2) as pool:
        await pool.wait(timeout=30)
        pid_a, _pid_b, next_pid = await _order_after_two_returns(pool)
        assert next_pid == pid_a
