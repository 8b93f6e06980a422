"""Approvals in Postgres, and the approvers a worker trusts (secrets never leave this side)."""

from __future__ import annotations

import hmac
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, Field, SecretStr

from contracts.approvals import ApprovalDecision, ApprovalRequest, VerifyDecisionResult, sign


class ApproverConfig(BaseModel):
    """One approver: the HMAC secret their decisions are signed with, and their roles."""

    secret: SecretStr
    roles: list[str] = Field(default_factory=list)


def verify(
    decision: ApprovalDecision, approvers: dict[str, ApproverConfig], required_roles: list[str]
) -> VerifyDecisionResult:
    approver = approvers.get(decision.principal)
    if approver is None:
        return VerifyDecisionResult(valid=False, reason=f"unknown approver {decision.principal!r}")
    expected = sign(decision, approver.secret.get_secret_value())
    if not hmac.compare_digest(expected, decision.signature):
        return VerifyDecisionResult(valid=False, reason="bad signature")
    if required_roles and not set(required_roles) & set(approver.roles):
        return VerifyDecisionResult(
            valid=False,
            reason=f"{decision.principal} lacks a required role ({', '.join(required_roles)})",
        )
    return VerifyDecisionResult(valid=True)


class ApprovalStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def record(self, request: ApprovalRequest) -> None:
        """Insert the request, or move it to its new status; replays write the same row."""
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO approvals (approval_id, run_id, subject, revision, content_hash, destination,"
                " scope, effect_key, approver_roles, preview, status, requested_at, expires_at, decided_by,"
                " decided_at, reason) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (approval_id) DO UPDATE SET status = EXCLUDED.status,"
                " decided_by = EXCLUDED.decided_by, decided_at = EXCLUDED.decided_at, reason = EXCLUDED.reason",
                (
                    request.approval_id, request.run_id, request.subject, request.revision,
                    request.content_hash, request.destination, request.scope, request.effect_key,
                    request.approver_roles, request.preview, request.status.value, request.requested_at,
                    request.expires_at, request.decided_by, request.decided_at, request.reason,
                ),
            )  # fmt: skip
            if request.decided_by is not None:
                await conn.execute(
                    "INSERT INTO run_events (run_id, type, data) VALUES (%s, %s, %s)",
                    (request.run_id, f"Approval{request.status.value.capitalize()}",
                     _jsonb({"approval_id": request.approval_id, "by": request.decided_by,
                             "revision": request.revision, "content_hash": request.content_hash,
                             "destination": request.destination, "reason": request.reason})),
                )  # fmt: skip

    async def list_approvals(
        self, run_id: str | None = None, limit: int = 100
    ) -> list[ApprovalRequest]:
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            where = "WHERE run_id = %s" if run_id else ""
            params: tuple[Any, ...] = (run_id, limit) if run_id else (limit,)
            await cur.execute(
                f"SELECT * FROM approvals {where} ORDER BY requested_at DESC LIMIT %s", params
            )
            return [ApprovalRequest.model_validate(row) for row in await cur.fetchall()]


def _jsonb(value: dict[str, Any]) -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb(value)
