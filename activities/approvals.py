"""Approval activities: persist requests and decisions; verify signatures where secrets live."""

from __future__ import annotations

from temporalio import activity

from activities._context import activity_logger
from adapters.approvals import ApprovalStore, ApproverConfig, verify
from contracts.approvals import (
    APPROVAL_RECORD_ACTIVITY,
    APPROVAL_VERIFY_ACTIVITY,
    RecordApprovalInput,
    VerifyDecisionInput,
    VerifyDecisionResult,
)


class ApprovalActivities:
    def __init__(self, store: ApprovalStore, approvers: dict[str, ApproverConfig]) -> None:
        self._store = store
        self._approvers = approvers

    @activity.defn(name=APPROVAL_RECORD_ACTIVITY)
    async def record(self, request: RecordApprovalInput) -> None:
        await self._store.record(request.request)
        activity_logger(approval_id=request.request.approval_id).info(
            "approval_recorded", status=request.request.status.value, by=request.request.decided_by
        )

    @activity.defn(name=APPROVAL_VERIFY_ACTIVITY)
    async def verify(self, request: VerifyDecisionInput) -> VerifyDecisionResult:
        result = verify(request.decision, self._approvers, request.approver_roles)
        activity_logger(approval_id=request.decision.approval_id).info(
            "approval_verified",
            principal=request.decision.principal,
            valid=result.valid,
            reason=result.reason,
        )
        return result
