"""Inputs, subscriptions and deliveries in Postgres (see contracts/waits.py for the protocol)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from contracts.waits import Delivery, LoggedInput, Subscription

Pause = Callable[[], Awaitable[None]]

_DELIVERIES_OF_SUBSCRIPTION = (
    "SELECT d.subscription_id, d.run_id, i.input_id, i.type, i.subject, i.source, i.data, i.logged_at"
    " FROM deliveries d JOIN inputs i ON i.input_id = d.input_id"
    " WHERE d.subscription_id = %s ORDER BY i.input_id"
)


def _delivery(row: dict[str, Any]) -> Delivery:
    return Delivery(
        subscription_id=row["subscription_id"],
        run_id=row["run_id"],
        input=LoggedInput(
            input_id=row["input_id"], type=row["type"], subject=row["subject"], source=row["source"],
            data=row["data"], logged_at=row["logged_at"],
        ),
    )  # fmt: skip


class WaitStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def install(
        self, subscription: Subscription, pause: Pause | None = None
    ) -> list[Delivery]:
        """Insert the subscription (committed), then scan inputs after its cursor.

        Returns every delivery the subscription has, including ones made by an earlier
        attempt or by the input side, so a retried install loses nothing.
        """
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO subscriptions (subscription_id, run_id, type, subject, resume_policy, after_cursor,"
                " since, expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (subscription_id) DO NOTHING",
                (subscription.subscription_id, subscription.run_id, subscription.type, subscription.subject,
                 subscription.resume_policy.value, subscription.after_cursor, subscription.since,
                 subscription.expires_at),
            )  # fmt: skip
        if pause is not None:
            await pause()
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO deliveries (subscription_id, input_id, run_id, signaled_at)"
                " SELECT %s, i.input_id, %s, now() FROM inputs i"
                " WHERE i.type = %s AND i.subject = %s AND i.input_id > %s"
                " AND (%s::timestamptz IS NULL OR i.logged_at >= %s::timestamptz)"
                " ON CONFLICT (subscription_id, input_id) DO NOTHING",
                (subscription.subscription_id, subscription.run_id, subscription.type, subscription.subject,
                 subscription.after_cursor, subscription.since, subscription.since),
            )  # fmt: skip
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(_DELIVERIES_OF_SUBSCRIPTION, (subscription.subscription_id,))
            return [_delivery(row) for row in await cur.fetchall()]

    async def submit(
        self,
        type_: str,
        subject: str,
        data: dict[str, Any],
        source: str = "cli",
        pause: Pause | None = None,
    ) -> tuple[LoggedInput, list[Delivery]]:
        """Log the input (committed), then deliver it to every active matching subscription."""
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                "INSERT INTO inputs (type, subject, source, data) VALUES (%s, %s, %s, %s)"
                " RETURNING input_id, type, subject, source, data, logged_at",
                (type_, subject, source, Jsonb(data)),
            )
            row = await cur.fetchone()
        assert row is not None
        logged = LoggedInput.model_validate(row)
        if pause is not None:
            await pause()
        return logged, await self.deliver(logged)

    async def deliver(self, logged: LoggedInput) -> list[Delivery]:
        """The input side's scan: deliver a logged input to every active matching subscription."""
        async with self._pool.connection() as conn, conn.transaction():
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                "INSERT INTO deliveries (subscription_id, input_id, run_id)"
                " SELECT s.subscription_id, %s, s.run_id FROM subscriptions s"
                " WHERE s.status = 'active' AND s.type = %s AND s.subject = %s AND s.after_cursor < %s"
                " AND s.expires_at > now() AND (s.since IS NULL OR s.since <= %s)"
                " ON CONFLICT (subscription_id, input_id) DO NOTHING RETURNING subscription_id, run_id",
                (logged.input_id, logged.type, logged.subject, logged.input_id, logged.logged_at),
            )
            made = await cur.fetchall()
        return [
            Delivery(subscription_id=r["subscription_id"], run_id=r["run_id"], input=logged)
            for r in made
        ]

    async def mark_signaled(self, deliveries: list[Delivery]) -> None:
        if not deliveries:
            return
        async with self._pool.connection() as conn:
            await conn.cursor().executemany(
                "UPDATE deliveries SET signaled_at = now() WHERE subscription_id = %s AND input_id = %s",
                [(d.subscription_id, d.input.input_id) for d in deliveries],
            )

    async def unsignaled(self, older_than_s: float, limit: int = 500) -> list[Delivery]:
        """Deliveries whose signal may have been lost (the sender died): the relay re-sends them."""
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                "SELECT d.subscription_id, d.run_id, i.input_id, i.type, i.subject, i.source, i.data, i.logged_at"
                " FROM deliveries d JOIN inputs i ON i.input_id = d.input_id"
                " WHERE d.signaled_at IS NULL AND d.delivered_at < now() - make_interval(secs => %s)"
                " ORDER BY d.delivered_at LIMIT %s",
                (older_than_s, limit),
            )
            return [_delivery(row) for row in await cur.fetchall()]

    async def close(self, subscription_id: str, status: str) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(
                "UPDATE subscriptions SET status = %s WHERE subscription_id = %s AND status = 'active'",
                (status, subscription_id),
            )

    async def deliveries(self, subscription_id: str) -> list[Delivery]:
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(_DELIVERIES_OF_SUBSCRIPTION, (subscription_id,))
            return [_delivery(row) for row in await cur.fetchall()]
