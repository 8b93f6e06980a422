"""The effect ledger in Postgres: claim before the external call, settle under a fence after.

Each public method opens its own transaction; the `_txn` twins run inside one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, OperationalError
from psycopg.errors import NoDataFound
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from adapters.batcher import Batcher
from adapters.statements import one_statement
from contracts.effects import (
    EffectAttempt,
    EffectRecord,
    EffectResolution,
    EffectStatus,
    PreparedCall,
    ResolveEffectInput,
)

_RETURNED = (
    "effect_key", "run_id", "tool_name", "target", "effect_class", "request_hash", "status",
    "attempt", "fence", "external_ref", "last_error", "created_at", "updated_at", "receipt",
)  # fmt: skip
"""The effect columns groundwork_claim_effect and groundwork_settle_effect return, in order."""
_COLUMNS = ", ".join((*_RETURNED, "request"))
_CLAIM_ARGS = ("effect_key", "run_id", "tool_name", "target", "effect_class", "request_hash")
_SETTLE_ARGS = ("effect_key", "fence", "status", "run_id", "activity_attempt", "external_ref")


def _record(values: Sequence[Any]) -> EffectRecord:
    """An EffectRecord from a ledger function's effect columns (_RETURNED, in order)."""
    return EffectRecord.model_validate(dict(zip(_RETURNED, values, strict=True)))


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
    def __init__(
        self,
        pool: AsyncConnectionPool,
        *,
        batch_slots: int = 2,
        after_shared_commit: Callable[[Sequence[dict[str, Any]]], None] | None = None,
    ) -> None:
        """`batch_slots`: how many ledger statements run at once; claims and settles arriving
        while all are busy go together, both kinds in one, in the next (adapters/batcher.py).
        One queue for both kinds rather than one each: under concurrent dispatches its
        statements carry more items, so fewer round trips and commits per effect.

        `after_shared_commit(items)` runs once such a shared statement has committed, before
        any of its callers has its answer: the crash point of the fault-injection tests."""
        self._pool = pool
        self._after_shared_commit = after_shared_commit
        self._statements: Batcher[dict[str, Any], tuple[Any, ...]] = Batcher(
            self._rows, every_callers=database_away, slots=batch_slots
        )

    @property
    def batches(self) -> int:
        """How many multi-item statements ran: for benchmarks and tests."""
        return self._statements.batches

    @property
    def statements(self) -> tuple[int, int]:
        """How many claim/settle statements ran, and how many items they carried in all."""
        return self._statements.runs, self._statements.items

    async def claim(self, call: PreparedCall, activity_attempt: int) -> Claim:
        """Insert the intent or lock the row, decide, and log the attempt: one transaction.

        A different request hash on the key -> KeyConflict; a row already succeeded,
        conflicted or waiting for a human -> AlreadySettled; otherwise the row goes to
        `dispatching` with attempt and fence bumped, committed before anything is sent.
        Concurrent claims and settles may share that transaction (see _batch_rows); each is
        decided as if it had come alone, and none returns before the transaction has committed.
        """
        row = await self._statements.submit(
            {
                "op": "claim",
                "effect_key": call.effect_key,
                "run_id": call.run_id,
                "tool_name": call.tool_name,
                "target": call.target,
                "effect_class": call.effect_class.value,
                "request_hash": call.request_hash,
                "request": {"tool": call.tool_name, "arguments": call.arguments},
                "activity_attempt": activity_attempt,
            }
        )
        kind, previous = row[0], EffectStatus(row[1])
        if kind == "claimed":  # the common case needs no record: attempt and fence are enough
            return Claimed(fence=int(row[10]), attempt=int(row[9]), previous_status=previous)
        record = _record(row[2:])
        if kind == "conflict":
            return KeyConflict(record, call.request_hash)
        return AlreadySettled(record)

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
        """Write the outcome if `fence` still owns the row; append the domain event with it.

        A stale fence changes nothing but the attempt log and returns the current row.
        Concurrent settles and claims may share one transaction (see _batch_rows).
        """
        row = await self._statements.submit(
            {
                "op": "settle",
                "effect_key": effect_key,
                "fence": fence,
                "status": status.value,
                "run_id": run_id,
                "activity_attempt": activity_attempt,
                "external_ref": external_ref,
                "receipt": receipt,
                "error": error,
                "domain_event": domain_event,
            }
        )
        return Settled(_record(row[1:]), stale=bool(row[0]))

    async def _rows(self, items: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
        """One row per item, in order: a claim's as groundwork_claim_effect returns it, a
        settle's as groundwork_settle_effect does. A lone item takes its own function."""
        if len(items) > 1:
            return await self._batch_rows(items)
        (item,) = items
        if item["op"] == "claim":
            return await self._claim_row(item)
        return await self._settle_row(item)

    async def _claim_row(self, item: dict[str, Any]) -> list[tuple[Any, ...]]:
        args = (*(item[k] for k in _CLAIM_ARGS), Jsonb(item["request"]), item["activity_attempt"])
        async with self._pool.connection() as conn, one_statement(conn):
            cur = await conn.execute(
                "SELECT * FROM groundwork_claim_effect(%s, %s, %s, %s, %s, %s, %s, %s)", args
            )
            row = await cur.fetchone()
        if row is None:
            raise LedgerError(f"effect {item['effect_key']} vanished during claim")
        return [row]

    async def _settle_row(self, item: dict[str, Any]) -> list[tuple[Any, ...]]:
        receipt = item["receipt"]
        args = (
            *(item[k] for k in _SETTLE_ARGS),
            Jsonb(receipt) if receipt is not None else None,
            item["error"],
            item["domain_event"],
        )
        async with self._pool.connection() as conn, one_statement(conn):
            try:
                cur = await conn.execute(
                    "SELECT * FROM groundwork_settle_effect(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    args,
                )
            except NoDataFound as err:
                raise LedgerError(f"effect {item['effect_key']} not found at settle") from err
            row = await cur.fetchone()
        if row is None:
            raise LedgerError(f"effect {item['effect_key']} not found at settle")
        return [row]

    async def _batch_rows(self, items: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
        """One statement, one commit for several claims and settles; rows in item order.

        Sent in effect-key order (stable, so one key's calls keep their arrival order): every
        batch then locks its rows in the same order, and two batches in flight at once cannot
        deadlock on each other.
        """
        order = sorted(range(len(items)), key=lambda i: items[i]["effect_key"])
        async with self._pool.connection() as conn, one_statement(conn):
            cur = await conn.execute(
                "SELECT * FROM groundwork_ledger_batch(%s)", (Jsonb([items[i] for i in order]),)
            )
            rows = await cur.fetchall()
        if self._after_shared_commit is not None:
            self._after_shared_commit([items[i] for i in order])
        if [row[0] for row in rows] != list(range(1, len(items) + 1)):
            raise LedgerError(f"ledger batch: {len(rows)} rows for {len(items)} items")
        results: list[tuple[Any, ...]] = [()] * len(items)
        for i, row in zip(order, rows, strict=True):
            # (ord, claim, previous_status, stale, *effect): a claim's row as
            # groundwork_claim_effect's, a settle's as groundwork_settle_effect's.
            results[i] = (
                (row[1], row[2], *row[4:]) if items[i]["op"] == "claim" else (row[3], *row[4:])
            )
        return results

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

    async def _event_txn(
        self, conn: AsyncConnection[Any], run_id: str, event_type: str, effect_key: str,
        external_ref: str | None, record: EffectRecord,
    ) -> None:  # fmt: skip
        await conn.execute(
            "INSERT INTO run_events (run_id, type, effect_key, data) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (effect_key, type) WHERE effect_key IS NOT NULL DO NOTHING",
            (run_id, event_type, effect_key, _event_data(external_ref, record)),
        )


def database_away(err: Exception) -> bool:
    """What every caller of a shared statement would have got alone: no connection or pool
    slot (no SQLSTATE), a connection exception (08), a server out of resources (53) or going
    down (57). A rolled-back transaction (40: deadlock, serialization) or a lock timeout is
    not: alone, each item may well go through."""
    if not isinstance(err, OperationalError):
        return False
    return err.sqlstate is None or err.sqlstate[:2] in ("08", "53", "57")


def _event_data(external_ref: str | None, record: EffectRecord) -> Jsonb:
    return Jsonb(
        {
            "external_ref": external_ref,
            "tool": record.tool_name,
            "target": record.target,
            "request_hash": record.request_hash,
        }
    )
