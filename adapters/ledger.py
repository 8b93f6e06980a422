"""The effect ledger in Postgres: claim before the external call, settle under a fence after.

Each public method opens its own transaction; the `_txn` twins run inside one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from contracts.effects import (
    EffectAttempt,
    EffectRecord,
    EffectResolution,
    EffectStatus,
    PreparedCall,
    ResolveEffectInput,
)

_COLUMNS = (
    "effect_key, run_id, tool_name, target, effect_class, request_hash, status, attempt, fence,"
    " external_ref, last_error, created_at, updated_at, request, receipt"
)


@dataclass(frozen=True)
class Claimed:
    """This attempt owns the effect now; only `fence` may settle it."""

    fence: int
    attempt: int
    previous_status: EffectStatus


@dataclass(frozen=True)
class AlreadySettled:
    """Nothing to dispatch: the ledger already holds a final answer (or a human must decide)."""

    record: EffectRecord


@dataclass(frozen=True)
class KeyConflict:
    """The key is taken by a different request; nothing is dispatched."""

    record: EffectRecord
    request_hash: str


Claim = Claimed | AlreadySettled | KeyConflict


@dataclass(frozen=True)
class Settled:
    record: EffectRecord
    stale: bool
    """True when the fence was stale: a newer attempt owns the row and this write was refused."""


class LedgerError(RuntimeError):
    pass


class EffectLedger:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def claim(self, call: PreparedCall, activity_attempt: int) -> Claim:
        async with self._pool.connection() as conn, conn.transaction():
            return await self._claim_txn(conn, call, activity_attempt)

    async def _claim_txn(
        self, conn: AsyncConnection[Any], call: PreparedCall, activity_attempt: int
    ) -> Claim:
        # One statement inserts the intent or locks the existing row, and returns it either way.
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(
            "INSERT INTO effects (effect_key, run_id, tool_name, target, effect_class, request_hash,"
            " request, status) VALUES (%s, %s, %s, %s, %s, %s, %s, 'prepared')"
            " ON CONFLICT (effect_key) DO UPDATE SET effect_key = EXCLUDED.effect_key"
            f" RETURNING {_COLUMNS}",
            (
                call.effect_key,
                call.run_id,
                call.tool_name,
                call.target,
                call.effect_class.value,
                call.request_hash,
                Jsonb({"tool": call.tool_name, "arguments": call.arguments}),
            ),
        )
        row = await cur.fetchone()
        if row is None:
            raise LedgerError(f"effect {call.effect_key} vanished during claim")
        record = EffectRecord.model_validate(row)
        if record.request_hash != call.request_hash:
            await self._attempt_txn(
                conn,
                record,
                activity_attempt,
                "claim",
                "conflict",
                {"request_hash": call.request_hash},
            )
            return KeyConflict(record, call.request_hash)
        if record.status in (
            EffectStatus.SUCCEEDED,
            EffectStatus.CONFLICT,
            EffectStatus.REQUIRES_HUMAN,
        ):
            await self._attempt_txn(
                conn, record, activity_attempt, "claim", f"already_{record.status.value}", {}
            )
            return AlreadySettled(record)
        # Bump attempt and fence and log the attempt in one round trip.
        bumped = await conn.execute(
            "WITH bumped AS (UPDATE effects SET status = 'dispatching', attempt = attempt + 1,"
            " fence = fence + 1, updated_at = now() WHERE effect_key = %s RETURNING attempt, fence)"
            " INSERT INTO effect_attempts (effect_key, attempt, fence, activity_attempt, phase, outcome, detail)"
            " SELECT %s, attempt, fence, %s, 'claim', 'dispatching', %s FROM bumped RETURNING attempt, fence",
            (
                call.effect_key,
                call.effect_key,
                activity_attempt,
                Jsonb({"previous": record.status.value}),
            ),
        )
        counters = await bumped.fetchone()
        assert counters is not None
        claimed = Claimed(
            fence=int(counters[1]), attempt=int(counters[0]), previous_status=record.status
        )
        return claimed

    async def settle(
        self,
        effect_key: str,
        fence: int,
        status: EffectStatus,
        *,
        run_id: str,
        activity_attempt: int,
        external_ref: str | None = None,
        receipt: dict[str, Any] | None = None,
        error: str | None = None,
        domain_event: str | None = None,
    ) -> Settled:
        """Write the outcome if `fence` still owns the row; append the domain event with it."""
        async with self._pool.connection() as conn, conn.transaction():
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                "UPDATE effects SET status = %s, external_ref = COALESCE(%s, external_ref),"
                " receipt = COALESCE(%s, receipt), last_error = %s, updated_at = now()"
                " WHERE effect_key = %s AND fence = %s AND status = 'dispatching'"
                f" RETURNING {_COLUMNS}",
                (
                    status.value,
                    external_ref,
                    Jsonb(receipt) if receipt is not None else None,
                    error,
                    effect_key,
                    fence,
                ),
            )
            updated = await cur.fetchone()
            record = (
                EffectRecord.model_validate(updated)
                if updated is not None
                else await self._get_txn(conn, effect_key, lock=False)
            )
            if record is None:
                raise LedgerError(f"effect {effect_key} not found at settle")
            if updated is None:
                await conn.execute(
                    "INSERT INTO effect_attempts (effect_key, attempt, fence, activity_attempt, phase,"
                    " outcome, detail) VALUES (%s, %s, %s, %s, 'settle', 'stale_fence_rejected', %s)",
                    (effect_key, record.attempt, fence, activity_attempt,
                     Jsonb({"wanted": status.value, "current_fence": record.fence})),
                )  # fmt: skip
                return Settled(record, stale=True)
            attempt_row = (effect_key, record.attempt, fence, activity_attempt, status.value,
                           Jsonb({"external_ref": external_ref, "error": error}))  # fmt: skip
            if status is EffectStatus.SUCCEEDED and domain_event:
                # The attempt and the domain event in one round trip, in this transaction.
                await conn.execute(
                    "WITH logged AS (INSERT INTO effect_attempts (effect_key, attempt, fence,"
                    " activity_attempt, phase, outcome, detail) VALUES (%s, %s, %s, %s, 'settle', %s, %s))"
                    " INSERT INTO run_events (run_id, type, effect_key, data) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (effect_key, type) WHERE effect_key IS NOT NULL DO NOTHING",
                    (*attempt_row, run_id, domain_event, effect_key,
                     _event_data(external_ref, record)),
                )  # fmt: skip
            else:
                await conn.execute(
                    "INSERT INTO effect_attempts (effect_key, attempt, fence, activity_attempt, phase,"
                    " outcome, detail) VALUES (%s, %s, %s, %s, 'settle', %s, %s)",
                    attempt_row,
                )
            return Settled(record, stale=False)

    async def resolve(
        self, run_id: str, resolution: ResolveEffectInput, domain_event: str
    ) -> EffectRecord:
        """Apply a human's answer to a `requires_human` effect; idempotent for the same answer."""
        async with self._pool.connection() as conn, conn.transaction():
            record = await self._get_txn(conn, resolution.effect_key, lock=True)
            if record is None:
                raise LedgerError(f"no effect {resolution.effect_key!r}")
            target_status = {
                EffectResolution.COMMITTED: EffectStatus.SUCCEEDED,
                EffectResolution.NOT_COMMITTED: EffectStatus.PREPARED,
                EffectResolution.ABANDON: EffectStatus.FAILED,
            }[resolution.resolution]
            if record.status is not EffectStatus.REQUIRES_HUMAN:
                if record.status is target_status:
                    return record  # the same resolution delivered twice
                raise LedgerError(
                    f"effect {resolution.effect_key} is {record.status.value}, not requires_human"
                )
            await conn.execute(
                "UPDATE effects SET status = %s, external_ref = COALESCE(%s, external_ref),"
                " last_error = %s, updated_at = now() WHERE effect_key = %s",
                (
                    target_status.value,
                    resolution.external_ref,
                    f"resolved by {resolution.principal}: {resolution.resolution.value} {resolution.note}".strip(),
                    resolution.effect_key,
                ),
            )
            await conn.execute(
                "INSERT INTO effect_attempts (effect_key, attempt, fence, activity_attempt, phase, outcome,"
                " detail) VALUES (%s, %s, %s, NULL, 'resolve', %s, %s)",
                (record.effect_key, record.attempt, record.fence, resolution.resolution.value,
                 Jsonb(resolution.model_dump(mode="json"))),
            )  # fmt: skip
            if target_status is EffectStatus.SUCCEEDED:
                await self._event_txn(
                    conn, run_id, domain_event, record.effect_key, resolution.external_ref, record
                )
            updated = await self._get_txn(conn, resolution.effect_key, lock=False)
            assert updated is not None
            return updated

    async def get(self, effect_key: str) -> EffectRecord | None:
        async with self._pool.connection() as conn:
            return await self._get_txn(conn, effect_key, lock=False)

    async def list_effects(
        self, run_id: str | None = None, status: EffectStatus | None = None, limit: int = 100
    ) -> list[EffectRecord]:
        clauses, params = [], []
        if run_id is not None:
            clauses.append("run_id = %s")
            params.append(run_id)
        if status is not None:
            clauses.append("status = %s")
            params.append(status.value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                f"SELECT {_COLUMNS} FROM effects {where} ORDER BY created_at DESC LIMIT %s",
                (*params, limit),
            )
            return [EffectRecord.model_validate(row) for row in await cur.fetchall()]

    async def attempts(self, effect_key: str) -> list[EffectAttempt]:
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                "SELECT attempt, fence, activity_attempt, phase, outcome, detail, at"
                " FROM effect_attempts WHERE effect_key = %s ORDER BY id",
                (effect_key,),
            )
            return [EffectAttempt.model_validate(row) for row in await cur.fetchall()]

    async def events(self, run_id: str, after: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        """The run's events after a cursor, in cursor order, with no gap that could fill later."""
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                "SELECT cursor, run_id, type, effect_key, data, at FROM run_events"
                " WHERE run_id = %s AND cursor > %s"
                " AND txid < pg_snapshot_xmin(pg_current_snapshot())"
                " ORDER BY cursor LIMIT %s",
                (run_id, after, limit),
            )
            return list(await cur.fetchall())

    async def _get_txn(
        self, conn: AsyncConnection[Any], effect_key: str, *, lock: bool
    ) -> EffectRecord | None:
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(
            f"SELECT {_COLUMNS} FROM effects WHERE effect_key = %s{' FOR UPDATE' if lock else ''}",
            (effect_key,),
        )
        row = await cur.fetchone()
        return EffectRecord.model_validate(row) if row else None

    async def _attempt_txn(
        self, conn: AsyncConnection[Any], record: EffectRecord, activity_attempt: int,
        phase: str, outcome: str, detail: dict[str, Any],
    ) -> None:  # fmt: skip
        await conn.execute(
            "INSERT INTO effect_attempts (effect_key, attempt, fence, activity_attempt, phase, outcome, detail)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (
                record.effect_key,
                record.attempt,
                record.fence,
                activity_attempt,
                phase,
                outcome,
                Jsonb(detail),
            ),
        )

    async def _event_txn(
        self, conn: AsyncConnection[Any], run_id: str, event_type: str, effect_key: str,
        external_ref: str | None, record: EffectRecord,
    ) -> None:  # fmt: skip
        await conn.execute(
            "INSERT INTO run_events (run_id, type, effect_key, data) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (effect_key, type) WHERE effect_key IS NOT NULL DO NOTHING",
            (run_id, event_type, effect_key, _event_data(external_ref, record)),
        )


def _event_data(external_ref: str | None, record: EffectRecord) -> Jsonb:
    return Jsonb(
        {
            "external_ref": external_ref,
            "tool": record.tool_name,
            "target": record.target,
            "request_hash": record.request_hash,
        }
    )
