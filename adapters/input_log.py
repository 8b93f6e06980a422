"""The durable input log and its activation outbox."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from ulid import ULID

from contracts.inputs import AgentInput, Caller, Disposition, InputRecord

_RECORD = (
    "SELECT public_id AS input_id, tenant, kind, type, source, subject, source_event_id, target, principal,"
    " trust, disposition, activation_refs, data, logged_at, input_id AS cursor FROM inputs"
)


@dataclass(frozen=True)
class Accepted:
    public_id: str
    cursor: int
    duplicate: bool


@dataclass(frozen=True)
class Conflict:
    public_id: str


class InputLog:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def accept(
        self, envelope: AgentInput, caller: Caller, body_hash: str
    ) -> Accepted | Conflict:
        """Durable before it returns; the same (tenant, source, source_event_id) is one input."""
        public_id = f"in_{str(ULID()).lower()}"
        async with self._pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "INSERT INTO inputs (public_id, tenant, kind, type, subject, source, source_event_id, target,"
                " occurred_at, correlation_id, causation_id, data_content_type, data, principal, trust, body_hash)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (tenant, source, source_event_id) WHERE source_event_id IS NOT NULL DO NOTHING"
                " RETURNING input_id",
                (
                    public_id, caller.tenant, envelope.kind.value, envelope.type, envelope.subject,
                    envelope.source, envelope.source_event_id, envelope.target, envelope.occurred_at,
                    envelope.correlation_id, envelope.causation_id, envelope.data_content_type,
                    Jsonb(envelope.data), caller.principal, caller.trust, body_hash,
                ),
            )  # fmt: skip
            row = await cur.fetchone()
            if row is not None:
                await conn.execute(
                    "INSERT INTO activation_outbox (input_id) VALUES (%s)", (row[0],)
                )
                return Accepted(public_id, int(row[0]), duplicate=False)
            cur = await conn.execute(
                "SELECT public_id, body_hash, input_id FROM inputs"
                " WHERE tenant = %s AND source = %s AND source_event_id = %s",
                (caller.tenant, envelope.source, envelope.source_event_id),
            )
            existing = await cur.fetchone()
        assert existing is not None
        if existing[1] != body_hash:
            return Conflict(str(existing[0]))
        return Accepted(str(existing[0]), int(existing[2]), duplicate=True)

    async def get(self, public_id: str, tenant: str) -> InputRecord | None:
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                f"{_RECORD} WHERE public_id = %s AND tenant = %s", (public_id, tenant)
            )
            row = await cur.fetchone()
        return InputRecord.model_validate(row) if row else None

    async def pending(self, conn: AsyncConnection[Any], limit: int) -> list[dict[str, Any]]:
        """Lock up to `limit` pending activations (other relays skip them) inside conn's transaction."""
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(
            "SELECT i.input_id AS cursor, i.public_id, i.tenant, i.kind, i.type, i.source, i.subject, i.target,"
            " i.principal, i.trust, i.data, i.logged_at FROM activation_outbox o JOIN inputs i ON i.input_id = o.input_id"
            " WHERE o.status = 'pending' ORDER BY o.created_at LIMIT %s FOR UPDATE OF o SKIP LOCKED",
            (limit,),
        )
        return list(await cur.fetchall())

    async def settle(
        self, conn: AsyncConnection[Any], cursor: int, disposition: Disposition, refs: list[dict[str, Any]],
        error: str | None = None,
    ) -> None:  # fmt: skip
        await conn.execute(
            "UPDATE inputs SET disposition = %s, activation_refs = %s WHERE input_id = %s",
            (disposition.value, Jsonb(refs), cursor),
        )
        await conn.execute(
            "UPDATE activation_outbox SET status = %s, attempts = attempts + 1, last_error = %s, updated_at = now()"
            " WHERE input_id = %s",
            ("failed" if error else "done", error, cursor),
        )

    async def settle_many(
        self,
        conn: AsyncConnection[Any],
        outcomes: list[tuple[int, Disposition, list[dict[str, Any]], str | None]],
    ) -> None:
        """`settle` for a batch of (cursor, disposition, refs, error) in one statement."""
        if not outcomes:
            return
        await conn.execute(
            "WITH v AS (SELECT * FROM unnest(%s::bigint[], %s::text[], %s::jsonb[], %s::text[])"
            " AS v(id, disposition, refs, error)),"
            " i AS (UPDATE inputs SET disposition = v.disposition, activation_refs = v.refs"
            " FROM v WHERE inputs.input_id = v.id)"
            " UPDATE activation_outbox o SET status = CASE WHEN v.error IS NULL THEN 'done' ELSE 'failed' END,"
            " attempts = o.attempts + 1, last_error = v.error, updated_at = now() FROM v WHERE o.input_id = v.id",
            (
                [o[0] for o in outcomes], [o[1].value for o in outcomes],
                [Jsonb(o[2]) for o in outcomes], [o[3] for o in outcomes],
            ),
        )  # fmt: skip

    def pool(self) -> AsyncConnectionPool:
        return self._pool
