"""Approvals: a run waits for a decision bound to exactly what it would do."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from definitions.governed import ApprovalBinding, EffectDeclaration

from contracts.approvals import (
    APPROVAL_RECORD_ACTIVITY,
    APPROVAL_VERIFY_ACTIVITY,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalStatus,
    DecisionResult,
    RecordApprovalInput,
    RevokeApprovalInput,
    Verdict,
    VerifyDecisionInput,
    VerifyDecisionResult,
    binding_mismatch,
)
from contracts.effects import (
    NeedsApproval,
)
from contracts.status import FailureReason, RunStatus, WaitingReason
from workflows._run_base import TOOL_RETRY, RunBase


class ApprovalsMixin(RunBase):
    @workflow.signal
    async def approve(self, decision: ApprovalDecision) -> None:
        """Approve the pending request (what `temporal workflow signal --name approve` sends)."""
        result = await self._consider(decision.model_copy(update={"verdict": Verdict.APPROVE}))
        workflow.logger.info("approve signal: %s", result.message)

    @workflow.signal
    async def reject(self, decision: ApprovalDecision) -> None:
        result = await self._consider(decision.model_copy(update={"verdict": Verdict.REJECT}))
        workflow.logger.info("reject signal: %s", result.message)

    @workflow.signal
    def revoke(self, revocation: RevokeApprovalInput) -> None:
        """Withdraw a pending or granted approval; a granted one is stopped before its effect."""
        if revocation.approval_id in self._ended:
            return
        self._ended[revocation.approval_id] = (
            ApprovalStatus.REVOKED,
            revocation.principal,
            revocation.reason or "revoked",
        )

    @workflow.update
    async def decide_approval(self, decision: ApprovalDecision) -> DecisionResult:
        """Approve or reject with a synchronous answer (the CLI and HTTP use this)."""
        return await self._consider(decision)

    @decide_approval.validator
    def validate_decide_approval(self, decision: ApprovalDecision) -> None:
        # Cheap checks only: a refused update leaves nothing in history.
        if decision.approval_id in self._decided:
            if self._decided[decision.approval_id] is not decision.verdict:
                raise ValueError(
                    f"approval {decision.approval_id} was already decided: "
                    f"{self._decided[decision.approval_id].value}"
                )
            return
        pending = self._pending_approval
        if pending is None:
            raise ValueError("this run has no pending approval")
        mismatch = binding_mismatch(pending, decision)
        if mismatch is not None:
            raise ValueError(mismatch)

    # -- approvals ------------------------------------------------------------------------

    async def _await_approval(
        self,
        tool_name: str,
        declaration: EffectDeclaration,
        needed: NeedsApproval,
        arguments: dict[str, Any],
    ) -> ApprovalDecision:
        binding = (
            declaration.approval_binding(arguments)
            if declaration.approval_binding is not None
            else ApprovalBinding(
                subject=needed.effect_key, revision="1", content_hash=needed.request_hash
            )
        )
        ttl = timedelta(seconds=declaration.approval_ttl_s)
        # The newest revision asked for is the only one that can still be approved.
        self._latest_revision[binding.subject] = str(binding.revision)
        async with self._approval_lock:  # parallel tool calls ask one at a time
            asked = 0
            while True:
                asked += 1
                now = workflow.now()
                request = ApprovalRequest(
                    approval_id=str(workflow.uuid4()),
                    run_id=self._spec.run_id,
                    subject=binding.subject,
                    revision=str(binding.revision),
                    content_hash=binding.content_hash,
                    destination=declaration.target,
                    scope=tool_name,
                    effect_key=needed.effect_key,
                    requested_at=now,
                    expires_at=now + ttl,
                    approver_roles=list(declaration.approver_roles),
                    preview=binding.preview,
                )
                await self._record_approval(request)
                self._pending_approval = request
                self._state.pending_approval = request
                self._transition(
                    RunStatus.WAITING,
                    "ApprovalRequested",
                    waiting_reason=WaitingReason.APPROVAL,
                    approval_id=request.approval_id,
                    subject=request.subject,
                    revision=request.revision,
                )
                approval_id = request.approval_id
                try:
                    await workflow.wait_condition(
                        lambda aid=approval_id: self._granted is not None or self._supersede(aid),  # type: ignore[misc]
                        timeout=ttl,
                    )
                except TimeoutError:
                    self._pending_approval = None
                    self._state.pending_approval = None
                    await self._record_approval(
                        request.model_copy(update={"status": ApprovalStatus.EXPIRED})
                    )
                    self._transition(
                        RunStatus.RUNNING, "ApprovalExpired", approval_id=request.approval_id
                    )
                    if (
                        declaration.on_expiry == "re_request"
                        and asked < declaration.max_approval_requests
                    ):
                        continue
                    self._abort(
                        FailureReason.APPROVAL_EXPIRED,
                        f"approval for {tool_name} expired after {ttl}"
                        + (f", asked {asked} times" if asked > 1 else ""),
                    )
                if approval_id in self._ended and self._granted is None:
                    return await self._end_without_decision(request)
                decision = self._granted
                assert decision is not None
                self._granted = None
                self._pending_approval = None
                self._state.pending_approval = None
                status = (
                    ApprovalStatus.APPROVED
                    if decision.verdict is Verdict.APPROVE
                    else ApprovalStatus.REJECTED
                )
                await self._record_approval(
                    request.model_copy(
                        update={
                            "status": status,
                            "decided_by": decision.principal,
                            "decided_at": workflow.now(),
                            "reason": decision.reason or None,
                        }
                    )
                )
                self._transition(
                    RunStatus.RUNNING,
                    "ReviewApproved" if status is ApprovalStatus.APPROVED else "ReviewRejected",
                    approval_id=request.approval_id,
                    by=decision.principal,
                )
                newer = self._latest_revision.get(request.subject, request.revision)
                if (
                    status is ApprovalStatus.APPROVED
                    and approval_id not in self._ended
                    and newer != request.revision
                ):
                    # A newer revision came while the grant was being recorded.
                    self._ended[approval_id] = (
                        ApprovalStatus.SUPERSEDED, "groundwork",
                        f"superseded by revision {newer} after the grant",
                    )  # fmt: skip
                if status is ApprovalStatus.APPROVED and approval_id in self._ended:
                    # Revoked or superseded after the grant, before the effect: the grant is void.
                    return await self._end_without_decision(request, transition=False)
                return decision

    def _supersede(self, approval_id: str) -> bool:
        """True when the approval ended without a decision (revoked, or a newer revision came)."""
        pending = self._pending_approval
        if (
            pending is not None
            and pending.approval_id == approval_id
            and approval_id not in self._ended
            and self._latest_revision.get(pending.subject, pending.revision) != pending.revision
        ):
            newer = self._latest_revision[pending.subject]
            self._ended[approval_id] = (
                ApprovalStatus.SUPERSEDED, "groundwork", f"superseded by revision {newer}",
            )  # fmt: skip
        return approval_id in self._ended

    async def _end_without_decision(
        self, request: ApprovalRequest, transition: bool = True
    ) -> ApprovalDecision:
        status, by, reason = self._ended[request.approval_id]
        self._pending_approval = None
        self._state.pending_approval = None
        await self._record_approval(
            request.model_copy(
                update={
                    "status": status,
                    "decided_by": by,
                    "decided_at": workflow.now(),
                    "reason": reason,
                }
            )
        )
        if transition:
            self._transition(
                RunStatus.RUNNING,
                f"Approval{status.value.capitalize()}",
                approval_id=request.approval_id,
                by=by,
                reason=reason,
            )
        else:
            self._event(
                f"Approval{status.value.capitalize()}", approval_id=request.approval_id, by=by
            )
        return ApprovalDecision(
            approval_id=request.approval_id, verdict=Verdict.REJECT, principal=by,
            subject=request.subject, revision=request.revision, content_hash=request.content_hash,
            destination=request.destination, scope=request.scope, reason=reason,
        )  # fmt: skip

    async def _record_approval(self, request: ApprovalRequest) -> None:
        await workflow.execute_activity(
            APPROVAL_RECORD_ACTIVITY,
            RecordApprovalInput(request=request),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=TOOL_RETRY,
        )

    async def _consider(self, decision: ApprovalDecision) -> DecisionResult:
        """One path for signals and updates: binding, expiry, then the signature, in an activity."""
        ended = self._ended.get(decision.approval_id)
        if ended is not None and decision.approval_id not in self._decided:
            current = self._pending_approval
            hint = f"; the current revision is {current.revision}" if current else ""
            return DecisionResult(
                accepted=False, message=f"approval {ended[0].value}: {ended[2]}{hint}"
            )
        decided = self._decided.get(decision.approval_id)
        if decided is not None:
            if decided is decision.verdict:
                return DecisionResult(accepted=True, message="already decided the same way")
            return DecisionResult(accepted=False, message=f"already decided: {decided.value}")
        pending = self._pending_approval
        if pending is None:
            return DecisionResult(accepted=False, message="this run has no pending approval")
        mismatch = binding_mismatch(pending, decision)
        if mismatch is not None:
            return DecisionResult(accepted=False, message=mismatch)
        if workflow.now() >= pending.expires_at:
            return DecisionResult(accepted=False, message="the approval request has expired")
        verified: VerifyDecisionResult = await workflow.execute_activity(
            APPROVAL_VERIFY_ACTIVITY,
            VerifyDecisionInput(decision=decision, approver_roles=pending.approver_roles),
            result_type=VerifyDecisionResult,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=TOOL_RETRY,
        )
        if not verified.valid:
            self._event(
                "ApprovalDecisionRefused", approval_id=decision.approval_id, reason=verified.reason
            )
            return DecisionResult(accepted=False, message=verified.reason)
        # Another decision may have landed while the signature was being checked.
        decided = self._decided.get(decision.approval_id)
        if decided is not None:
            same = decided is decision.verdict
            return DecisionResult(
                accepted=same, message="already decided" + ("" if same else f": {decided.value}")
            )
        if self._pending_approval is not pending:
            return DecisionResult(
                accepted=False, message="the approval request changed while verifying"
            )
        self._decided[decision.approval_id] = decision.verdict
        self._granted = decision
        status = (
            ApprovalStatus.APPROVED
            if decision.verdict is Verdict.APPROVE
            else ApprovalStatus.REJECTED
        )
        return DecisionResult(
            accepted=True, message=f"{status.value} by {decision.principal}", status=status
        )
