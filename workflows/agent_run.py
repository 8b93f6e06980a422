"""AgentRunWorkflow: one agent Run, durable. The openai-agents loop runs here; every model
turn and every tool call is an activity, budgets are checked before each action, and each
status change follows the transition table and is mirrored to search attributes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from agents import AgentsException, FunctionTool, RunConfig, Runner
    from agents.tool_context import ToolContext

    from definitions import catalog
    from definitions.governed import ApprovalBinding, EffectDeclaration, effect_of
    from definitions.waits import is_wait_tool

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
    EFFECT_DISPATCH_ACTIVITY,
    EFFECT_RESOLVE_ACTIVITY,
    Classification,
    Denied,
    EffectDispatchInput,
    EffectOutcome,
    EffectRecord,
    EffectResolution,
    EffectResolveActivityInput,
    EffectStatus,
    NeedsApproval,
    PreparedCall,
    ResolveEffectInput,
)
from contracts.model_turn import ModelTurnResult
from contracts.prepare import prepare
from contracts.run import (
    MAX_LAST_EVENTS,
    BudgetUsage,
    EffectClass,
    RunEvent,
    RunResult,
    RunSpec,
    RunState,
    ToolPolicy,
    workflow_id_for,
)
from contracts.search_attributes import (
    GW_AGENT,
    GW_RELEASE,
    GW_STATUS,
    GW_TENANT,
    GW_WAITING_REASON,
)
from contracts.status import FailureReason, RunStatus, WaitingReason, check_transition
from contracts.tool_call import TOOL_CALL_ACTIVITY, ToolCallInput, ToolCallResult
from contracts.waits import (
    SUBSCRIPTION_CLOSE_ACTIVITY,
    SUBSCRIPTION_INSTALL_ACTIVITY,
    CloseSubscriptionInput,
    Delivery,
    InstallResult,
    Subscription,
)
from workflows._model_stub import TurnHooks, WorkflowModel, WorkflowModelProvider
from workflows._tool_gateway import UngovernableToolError, govern

TOOL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
)

EFFECT_MAX_ATTEMPTS = 6


def _effect_retry() -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=20),
        maximum_attempts=EFFECT_MAX_ATTEMPTS,
    )


class RunAbortedError(Exception):
    """Raised inside the SDK's loop when the run must end FAILED; see `_must_fail`."""


class BudgetExhaustedError(RunAbortedError):
    """Raised before an action the budget does not allow; ends the run FAILED(budget)."""


@workflow.defn(name="AgentRun")
class AgentRunWorkflow:
    @workflow.init
    def __init__(self, spec: RunSpec) -> None:
        self._spec = spec
        self._state = RunState(
            run_id=spec.run_id,
            agent=spec.release.agent,
            tenant=spec.tenant,
            budgets=spec.budgets,
        )
        self._current_agent = spec.release.agent
        self._must_fail: tuple[FailureReason, str] | None = None
        """Set where the run must end FAILED from inside the SDK's loop, which may wrap our
        exception (a tool's error becomes a UserError); run() honours it whatever surfaces."""
        self._resolutions: dict[str, ResolveEffectInput] = {}
        self._pending_approval: ApprovalRequest | None = None
        self._granted: ApprovalDecision | None = None
        self._decided: dict[str, Verdict] = {}
        self._latest_revision: dict[str, str] = {}
        self._ended: dict[str, tuple[ApprovalStatus, str, str]] = {}
        """Approvals ended without a decision: id -> (superseded|revoked, by, reason)."""
        self._approval_lock = asyncio.Lock()
        self._delivered: dict[str, dict[int, Delivery]] = {}
        self._awaiting_resolution: set[str] = set()

    @workflow.query
    def get_state(self) -> RunState:
        return self._state

    @workflow.signal
    def resolve_effect(self, resolution: ResolveEffectInput) -> None:
        """A human's answer for an effect whose outcome the target could not tell."""
        if resolution.effect_key not in self._awaiting_resolution:
            workflow.logger.warning(
                "resolve_effect for %s ignored: no effect of this run awaits it",
                resolution.effect_key,
            )
            return
        self._resolutions.setdefault(resolution.effect_key, resolution)

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

    @workflow.signal
    def deliver_input(self, delivery: Delivery) -> None:
        """An input matched one of this run's subscriptions; duplicates are the same delivery."""
        self._delivered.setdefault(delivery.subscription_id, {})[delivery.input.input_id] = delivery

    @workflow.run
    async def run(self, spec: RunSpec) -> RunResult:
        self._transition(RunStatus.RUNNING, "RunStarted", input_chars=len(spec.input))
        expected_id = workflow_id_for(spec.run_id)
        if workflow.info().workflow_id != expected_id:
            return self._fail(
                FailureReason.AGENT_ERROR,
                f"workflow id must be {expected_id!r} for run_id {spec.run_id!r}",
            )
        try:
            agent = govern(catalog.build(spec.release.agent), self._invoke_tool)
        except (catalog.UnknownAgentError, UngovernableToolError) as err:
            return self._fail(FailureReason.AGENT_ERROR, str(err))
        model = WorkflowModel(
            run_id=spec.run_id,
            route=spec.release.model_route,
            agent_name=lambda: self._current_agent,
            hooks=TurnHooks(before=self._before_model_turn, after=self._after_model_turn),
            task_queue=spec.model_task_queue,
            timeout=timedelta(seconds=spec.timeouts.model_turn_s),
            heartbeat=timedelta(seconds=spec.timeouts.heartbeat_s),
        )
        try:
            result = await Runner.run(
                agent,
                spec.input,
                run_config=RunConfig(
                    model_provider=WorkflowModelProvider(model),
                    tracing_disabled=True,
                    workflow_name=f"run-{spec.run_id}",
                ),
                # Our step budget is the limit; the SDK's own must never be the one that trips.
                max_turns=spec.budgets.max_steps + 1,
            )
        except asyncio.CancelledError:
            self._cancelled()
            raise
        except Exception as err:
            if self._must_fail is not None:
                self._fail(*self._must_fail)
            if _cancellation_in(err):
                self._cancelled()
                raise CancelledError("run cancelled") from err
            if isinstance(err, ActivityError):
                self._fail(*self._activity_failure(err))
            if isinstance(err, AgentsException):
                self._fail(FailureReason.AGENT_ERROR, f"{type(err).__name__}: {err}")
            raise  # anything else is a bug: fail the workflow task, fix, and the run resumes
        if self._must_fail is not None:
            # An error raised inside a tool can be swallowed by the SDK; it still ends the run.
            self._fail(*self._must_fail)
        output = result.final_output
        text = output if isinstance(output, str) else _to_text(output)
        self._state.final_output = text
        self._transition(RunStatus.COMPLETED, "RunCompleted", output_chars=len(text))
        return self._result()

    # -- budgets and accounting -------------------------------------------------------

    def _exhaust(self, message: str) -> BudgetExhaustedError:
        self._must_fail = (FailureReason.BUDGET, message)
        return BudgetExhaustedError(message)

    def _abort(self, reason: FailureReason, message: str) -> NoReturn:
        """End the run FAILED from inside a tool or model call (see `_must_fail`)."""
        self._must_fail = (reason, message)
        raise RunAbortedError(message)

    def _before_model_turn(self) -> int:
        usage, budgets = self._state.usage, self._spec.budgets
        if usage.steps >= budgets.max_steps:
            raise self._exhaust(
                f"max_steps={budgets.max_steps} reached before step {usage.steps + 1}"
            )
        if usage.tokens >= budgets.max_tokens:
            raise self._exhaust(f"max_tokens={budgets.max_tokens} reached ({usage.tokens} used)")
        usage.steps += 1
        self._state.step = usage.steps
        return usage.steps

    def _after_model_turn(self, result: ModelTurnResult) -> None:
        usage = self._state.usage
        usage.input_tokens += result.usage.input_tokens
        usage.output_tokens += result.usage.output_tokens
        self._state.transcript_ref = result.transcript_ref
        calls = [o.get("name") for o in result.output if o.get("type") == "function_call"]
        self._event(
            "ModelTurnCompleted",
            step=usage.steps,
            tool_calls=calls,
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
        )

    async def _invoke_tool(
        self, agent_name: str, tool: FunctionTool, ctx: ToolContext[Any], arguments: str
    ) -> str:
        usage, budgets = self._state.usage, self._spec.budgets
        if self._must_fail is not None:
            raise RunAbortedError(self._must_fail[1])
        if usage.tool_calls >= budgets.max_tool_calls:
            raise self._exhaust(
                f"max_tool_calls={budgets.max_tool_calls} reached before calling {tool.name}"
            )
        if is_wait_tool(tool):
            return await self._wait_for_event(ctx, arguments)
        declaration = effect_of(tool)
        policy = self._policy(tool.name, declaration)
        if declaration is not None:
            # A declared effect always takes the ledger path; a snapshot cannot downgrade it to a read.
            if policy.effect_class is EffectClass.READ:
                policy = policy.model_copy(update={"effect_class": declaration.effect_class})
            return await self._invoke_effect(agent_name, tool, declaration, policy, ctx, arguments)
        if not policy.allowed:
            self._event("ToolDenied", tool=tool.name, call_id=ctx.tool_call_id)
            return f"denied: tool {tool.name!r} is not allowed for this run (policy {self._spec.release.policy_version})"
        usage.tool_calls += 1
        self._event("ToolCalled", tool=tool.name, call_id=ctx.tool_call_id, step=usage.steps)
        result: ToolCallResult = await workflow.execute_activity(
            TOOL_CALL_ACTIVITY,
            ToolCallInput(
                run_id=self._spec.run_id,
                step=usage.steps,
                agent_name=self._spec.release.agent,
                owner_agent=agent_name,
                tool_name=tool.name,
                call_id=ctx.tool_call_id,
                arguments=arguments,
                effect_class=policy.effect_class,
            ),
            result_type=ToolCallResult,
            start_to_close_timeout=timedelta(seconds=self._spec.timeouts.tool_call_s),
            heartbeat_timeout=timedelta(seconds=self._spec.timeouts.heartbeat_s),
            retry_policy=TOOL_RETRY,
            summary=f"{tool.name} ({policy.effect_class.value})",
        )
        self._event(
            "ToolReturned",
            tool=tool.name,
            call_id=ctx.tool_call_id,
            output_bytes=result.output_bytes,
            stored=result.stored_ref is not None,
            error=result.error,
        )
        return result.output

    # -- governed tools: prepare in here, dispatch through the ledger -------------------

    def _policy(self, tool_name: str, declaration: EffectDeclaration | None) -> ToolPolicy:
        snapshot = self._spec.policy.get(tool_name)
        if snapshot is not None:
            return snapshot
        if declaration is not None:
            return ToolPolicy(effect_class=declaration.effect_class, approval=declaration.approval)
        return ToolPolicy()

    async def _invoke_effect(
        self,
        agent_name: str,
        tool: FunctionTool,
        declaration: EffectDeclaration,
        policy: ToolPolicy,
        ctx: ToolContext[Any],
        arguments: str,
    ) -> str:
        try:
            parsed = json.loads(arguments or "{}")
        except ValueError as err:
            return f"error (invalid_arguments): arguments are not JSON: {err}"
        if not isinstance(parsed, dict):
            return "error (invalid_arguments): arguments must be a JSON object"
        try:
            effect_key = declaration.effect_key(parsed)
        except Exception as err:  # the user's key function: any failure is a bad call, not a crash
            return f"error (invalid_arguments): cannot derive the effect key: {err}"

        def prepare_call(approved: bool) -> PreparedCall | Denied | NeedsApproval:
            return prepare(
                run_id=self._spec.run_id,
                agent_name=self._spec.release.agent,
                owner_agent=agent_name,
                tool_name=tool.name,
                call_id=ctx.tool_call_id,
                arguments=parsed,
                policy=policy,
                target=declaration.target,
                effect_key=str(effect_key),
                domain_event=declaration.domain_event,
                now=workflow.now(),
                timeout=timedelta(seconds=self._spec.timeouts.tool_call_s),
                approved=approved,
            )

        decision = prepare_call(approved=False)
        if isinstance(decision, Denied):
            self._event(
                "ToolDenied", tool=tool.name, call_id=ctx.tool_call_id, reason=decision.reason
            )
            return f"denied: {decision.reason}"
        if isinstance(decision, NeedsApproval):
            verdict = await self._await_approval(tool.name, declaration, decision, parsed)
            if verdict.verdict is Verdict.REJECT:
                self._event(
                    "ToolDenied", tool=tool.name, call_id=ctx.tool_call_id, reason="rejected"
                )
                return f"rejected by {verdict.principal}: {verdict.reason or 'no reason given'}; nothing was done"
            # The approval is a fact (ReviewApproved); the call still passes prepare.
            decision = prepare_call(approved=True)
            if not isinstance(decision, PreparedCall):
                return f"denied: {getattr(decision, 'reason', 'not allowed after approval')}"
        self._state.usage.tool_calls += 1
        self._event(
            "EffectPrepared",
            tool=tool.name,
            effect_key=decision.effect_key,
            effect_class=decision.effect_class.value,
            target=decision.target,
        )
        outcome = await self._dispatch_until_settled(decision)
        self._event(
            "EffectSettled",
            tool=tool.name,
            effect_key=decision.effect_key,
            status=outcome.status.value,
            external_ref=outcome.external_ref,
            replayed=outcome.replayed,
        )
        if outcome.status is EffectStatus.SUCCEEDED:
            return f"ok: effect {outcome.effect_key} committed at {decision.target} as {outcome.external_ref}"
        message = f"error ({outcome.status.value}): {outcome.message}"
        if declaration.fail_run_on_error:
            self._abort(FailureReason.TOOL_ERROR, f"{tool.name}: {message}")
        return message

    async def _dispatch_until_settled(self, call: PreparedCall) -> EffectOutcome:
        while True:
            try:
                outcome: EffectOutcome = await workflow.execute_activity(
                    EFFECT_DISPATCH_ACTIVITY,
                    EffectDispatchInput(call=call, max_attempts=EFFECT_MAX_ATTEMPTS),
                    result_type=EffectOutcome,
                    start_to_close_timeout=timedelta(seconds=self._spec.timeouts.tool_call_s),
                    heartbeat_timeout=timedelta(seconds=self._spec.timeouts.heartbeat_s),
                    retry_policy=_effect_retry(),
                    summary=f"{call.tool_name} -> {call.target} [{call.effect_key}]",
                )
            except ActivityError as err:
                if isinstance(err.cause, CancelledError):
                    raise
                return EffectOutcome(
                    effect_key=call.effect_key,
                    status=EffectStatus.FAILED,
                    classification=Classification.DO_NOT_RETRY,
                    message=f"dispatch failed: {err.cause or err}",
                )
            if outcome.status is not EffectStatus.REQUIRES_HUMAN:
                return outcome
            resolution, record = await self._wait_for_resolution(call, outcome)
            if resolution.resolution is EffectResolution.NOT_COMMITTED:
                continue  # the ledger row is back to prepared: one more dispatch
            return EffectOutcome(
                effect_key=record.effect_key,
                status=record.status,
                classification=Classification.DO_NOT_RETRY,
                external_ref=record.external_ref,
                message=f"resolved by {resolution.principal}: {resolution.resolution.value}",
            )

    async def _wait_for_resolution(
        self, call: PreparedCall, outcome: EffectOutcome
    ) -> tuple[ResolveEffectInput, EffectRecord]:
        """WAITING(effect_unknown) until `resolve_effect`; the ledger records the answer."""
        self._awaiting_resolution.add(call.effect_key)
        self._transition(
            RunStatus.WAITING,
            "EffectNeedsHuman",
            waiting_reason=WaitingReason.EFFECT_UNKNOWN,
            effect_key=call.effect_key,
            message=outcome.message,
        )
        await workflow.wait_condition(lambda: call.effect_key in self._resolutions)
        resolution = self._resolutions.pop(call.effect_key)
        self._awaiting_resolution.discard(call.effect_key)
        record: EffectRecord = await workflow.execute_activity(
            EFFECT_RESOLVE_ACTIVITY,
            EffectResolveActivityInput(
                run_id=self._spec.run_id, resolution=resolution, domain_event=call.domain_event
            ),
            result_type=EffectRecord,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=TOOL_RETRY,
        )
        self._transition(
            RunStatus.RUNNING,
            "EffectResolved",
            effect_key=call.effect_key,
            resolution=resolution.resolution.value,
            principal=resolution.principal,
        )
        return resolution, record

    # -- durable waits --------------------------------------------------------------------

    async def _wait_for_event(self, ctx: ToolContext[Any], arguments: str) -> str:
        try:
            args = json.loads(arguments or "{}")
            type_, subject = str(args["type"]), str(args["subject"])
            timeout = timedelta(seconds=max(1, int(args.get("timeout_s", 3600))))
        except (ValueError, KeyError, TypeError) as err:
            return (
                f"error (invalid_arguments): wait_for_event needs type, subject, timeout_s: {err}"
            )
        subscription = Subscription(
            subscription_id=f"{self._spec.run_id}:{workflow.uuid4()}",
            run_id=self._spec.run_id,
            type=type_,
            subject=subject,
            after_cursor=self._state.input_cursor,
            since=workflow.info().start_time - timedelta(seconds=5),  # margin for clock skew
            expires_at=workflow.now() + timeout,
        )
        key = subscription.subscription_id
        installed: InstallResult = await workflow.execute_activity(
            SUBSCRIPTION_INSTALL_ACTIVITY,
            subscription,
            result_type=InstallResult,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=TOOL_RETRY,
        )
        for delivery in installed.deliveries:
            self.deliver_input(delivery)
        waited = False
        if not self._delivered.get(key):
            waited = True
            self._transition(
                RunStatus.WAITING,
                "WaitingForEvent",
                waiting_reason=WaitingReason.EVENT,
                subscription_id=key,
                type=type_,
                subject=subject,
            )
            with contextlib.suppress(TimeoutError):  # expiry is an answer too: "timed out"
                await workflow.wait_condition(
                    lambda: bool(self._delivered.get(key)), timeout=timeout
                )
        delivered = self._delivered.get(key, {})
        first = delivered[min(delivered)] if delivered else None
        await workflow.execute_activity(
            SUBSCRIPTION_CLOSE_ACTIVITY,
            CloseSubscriptionInput(subscription_id=key, status="satisfied" if first else "expired"),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=TOOL_RETRY,
        )
        if waited:
            self._transition(
                RunStatus.RUNNING,
                "EventDelivered" if first else "WaitExpired",
                subscription_id=key,
                input_id=first.input.input_id if first else None,
            )
        if first is None:
            return f"timed out after {timeout} waiting for {type_} about {subject}"
        self._state.input_cursor = max(self._state.input_cursor, first.input.input_id)
        return json.dumps(
            {"input_id": first.input.input_id, "type": first.input.type, "subject": first.input.subject,
             "data": first.input.data},
            sort_keys=True,
        )  # fmt: skip

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
            while True:
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
                    if declaration.on_expiry == "re_request":
                        continue
                    self._abort(
                        FailureReason.APPROVAL_EXPIRED,
                        f"approval for {tool_name} expired after {ttl}",
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
                if status is ApprovalStatus.APPROVED and approval_id in self._ended:
                    # Revoked after the grant but before the effect: the grant is void.
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

    # -- status, events, search attributes ---------------------------------------------

    def _event(self, type_: str, **data: Any) -> None:
        self._state.event_count += 1
        event = RunEvent(seq=self._state.event_count, type=type_, at=workflow.now(), data=data)
        self._state.last_events = [*self._state.last_events, event][-MAX_LAST_EVENTS:]

    def _transition(
        self,
        target: RunStatus,
        event: str,
        waiting_reason: WaitingReason | None = None,
        **data: Any,
    ) -> None:
        check_transition(self._state.status, target)
        previous = self._state.status
        self._state.status = target
        self._state.waiting_reason = waiting_reason
        self._event(event, status_from=previous.value, status_to=target.value, **data)
        workflow.upsert_search_attributes(
            [
                GW_STATUS.value_set(target.value),
                GW_WAITING_REASON.value_set(waiting_reason.value if waiting_reason else ""),
                GW_AGENT.value_set(self._spec.release.agent),
                GW_TENANT.value_set(self._spec.tenant),
                GW_RELEASE.value_set(self._spec.release.release_id),
            ]
        )
        workflow.logger.info(
            "run status %s -> %s", previous.value, target.value, extra={"run_id": self._spec.run_id}
        )

    def _result(self) -> RunResult:
        return RunResult(
            run_id=self._spec.run_id,
            status=self._state.status,
            final_output=self._state.final_output,
            failure_reason=self._state.failure_reason,
            failure_message=self._state.failure_message,
            usage=self._state.usage.model_copy() if self._state.usage else BudgetUsage(),
            transcript_ref=self._state.transcript_ref,
        )

    def _fail(self, reason: FailureReason, message: str) -> NoReturn:
        if self._state.status is not RunStatus.FAILED:
            self._state.failure_reason = reason
            self._state.failure_message = message
            self._transition(RunStatus.FAILED, "RunFailed", reason=reason.value, message=message)
        # Failing the workflow (not returning) keeps Temporal's own status equal to ours.
        raise ApplicationError(
            f"run failed ({reason.value}): {message}",
            self._result().model_dump(mode="json"),
            type=f"RunFailed.{reason.value}",
            non_retryable=True,
        )

    def _cancelled(self) -> None:
        if not self._state.status.is_terminal:
            self._transition(RunStatus.CANCELLED, "RunCancelled")

    @staticmethod
    def _activity_failure(err: ActivityError) -> tuple[FailureReason, str]:
        cause: BaseException | None = err.cause
        message = str(cause) if cause else str(err)
        kind = FailureReason.INTERNAL
        if isinstance(cause, ApplicationError) and cause.type:
            kind = (
                FailureReason.TOOL_ERROR
                if cause.type == "UnknownAgent"
                else FailureReason.MODEL_ERROR
            )
        if isinstance(cause, FailureError) and "tool_call" in (err.activity_type or ""):
            kind = FailureReason.TOOL_ERROR
        return kind, f"{err.activity_type}: {message}"


def _cancellation_in(err: BaseException) -> bool:
    """Whether a Temporal cancellation hides in the chain (the SDK wraps tool errors)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, CancelledError | asyncio.CancelledError):
            return True
        if isinstance(current, ActivityError) and isinstance(current.cause, CancelledError):
            return True
        current = current.__cause__ or current.__context__
    return False


def _to_text(output: Any) -> str:
    if hasattr(output, "model_dump_json"):
        return str(output.model_dump_json())
    return str(output)
