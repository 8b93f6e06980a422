"""Approvals bound to exactly what is approved: subject, revision, content hash, destination, scope."""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from contracts.hashing import canonical_json

APPROVAL_RECORD_ACTIVITY = "groundwork.approval_record"
APPROVAL_VERIFY_ACTIVITY = "groundwork.approval_verify"


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"
    REVOKED = "revoked"


class Verdict(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"


class ApprovalRequest(BaseModel):
    approval_id: str
    run_id: str
    subject: str
    revision: str
    content_hash: str
    destination: str
    scope: str
    effect_key: str
    requested_at: datetime
    expires_at: datetime
    approver_roles: list[str] = Field(default_factory=list)
    preview: str = ""
    status: ApprovalStatus = ApprovalStatus.PENDING
    decided_by: str | None = None
    decided_at: datetime | None = None
    reason: str | None = None


class ApprovalDecision(BaseModel):
    """A decision as sent by `approve` / `reject` signals and the `decide_approval` update.

    Every bound field must equal the pending request's; the signature is HMAC-SHA256 with
    the principal's secret over `signing_payload`, verified in an activity.
    """

    approval_id: str
    verdict: Verdict
    principal: str
    subject: str
    revision: str
    content_hash: str
    destination: str
    scope: str
    reason: str = ""
    signature: str = ""


class RevokeApprovalInput(BaseModel):
    """The `revoke` signal: withdraw an approval before its effect executes."""

    approval_id: str
    principal: str
    reason: str = ""


class DecisionResult(BaseModel):
    accepted: bool
    message: str
    status: ApprovalStatus | None = None


class VerifyDecisionInput(BaseModel):
    decision: ApprovalDecision
    approver_roles: list[str]


class VerifyDecisionResult(BaseModel):
    valid: bool
    reason: str = ""


class RecordApprovalInput(BaseModel):
    request: ApprovalRequest


def signing_payload(decision: ApprovalDecision) -> str:
    return canonical_json(decision.model_dump(mode="json", exclude={"signature", "reason"}))


def sign(decision: ApprovalDecision, secret: str) -> str:
    return hmac.new(secret.encode(), signing_payload(decision).encode(), hashlib.sha256).hexdigest()


def signed_decision(
    request: ApprovalRequest, verdict: Verdict, principal: str, secret: str, reason: str = ""
) -> ApprovalDecision:
    """A decision bound to every field of `request`, signed with the principal's secret:
    what `groundwork approve` / `reject` and `groundwork demo --yes` send."""
    unsigned = ApprovalDecision(
        approval_id=request.approval_id, verdict=verdict, principal=principal,
        subject=request.subject, revision=request.revision, content_hash=request.content_hash,
        destination=request.destination, scope=request.scope, reason=reason,
    )  # fmt: skip
    return unsigned.model_copy(update={"signature": sign(unsigned, secret)})


def binding_mismatch(request: ApprovalRequest, decision: ApprovalDecision) -> str | None:
    """Why a decision does not bind to this request, or None when every bound field matches."""
    if decision.subject != request.subject:
        return f"subject {decision.subject!r} is not {request.subject!r}"
    if decision.revision != request.revision:
        return f"revision {decision.revision} is superseded: the current revision is {request.revision}"
    if decision.approval_id != request.approval_id:
        return f"approval {decision.approval_id} is not the pending one ({request.approval_id})"
    if decision.content_hash != request.content_hash:
        return "content hash does not match the content waiting for approval"
    if decision.destination != request.destination:
        return f"destination {decision.destination!r} is not {request.destination!r}"
    if decision.scope != request.scope:
        return f"scope {decision.scope!r} is not {request.scope!r}"
    return None
