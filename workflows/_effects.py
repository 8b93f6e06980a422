"""Governed tools: prepare in the workflow, dispatch through the ledger, wait for a human
when the target cannot tell."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from agents import FunctionTool
    from agents.tool_context import ToolContext

    from definitions.governed import EffectDeclaration

from contracts.approvals import (
    Verdict,
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
    EffectResolutionResult,
    EffectResolveActivityInput,
    EffectStatus,
    NeedsApproval,
    PreparedCall,
    ResolveEffectInput,
    resolution_problem,
)
from contracts.prepare import prepare
from contracts.run import (
    ToolPolicy,
)
from contracts.status import FailureReason, RunStatus, WaitingReason
from workflows._approvals import ApprovalsMixin
from workflows._run_base import TOOL_RETRY

EFFECT_MAX_ATTEMPTS = 6
"""Attempts the target gets: from this one on, the activity settles a target failure as
`failed` or `requires_human` and returns instead of raising."""


def _effect_retry(max_interval_s: float) -> RetryPolicy:
    # No attempt limit: an attempt that raises has no verdict (the ledger was unreachable,
    # the worker died), and a limit would turn that into a `failed` the target may
    # contradict. The target's failures are bounded by EFFECT_MAX_ATTEMPTS in the activity.
    longest = timedelta(seconds=max_interval_s)
    return RetryPolicy(
        initial_interval=min(timedelta(seconds=1), longest),
        backoff_coefficient=2.0,
        maximum_interval=longest,
        maximum_attempts=0,
    )


class EffectsMixin(ApprovalsMixin):
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

    @workflow.update
    async def decide_effect(self, resolution: ResolveEffectInput) -> EffectResolutionResult:
        """Resolve with a synchronous answer (the CLI and HTTP use this): it returns once
        the ledger has recorded the resolution. The same answer again (a client retrying
        after a lost response) gets the recorded result; it is one answer, not two."""
        key = resolution.effect_key
        if self._answered_already(resolution):
            return self._resolution_result(*self._resolved[key])
        self._resolutions[key] = resolution
        await workflow.wait_condition(lambda: self._resolved.get(key, (None,))[0] is resolution)
        return self._resolution_result(*self._resolved[key])

    @decide_effect.validator
    def validate_decide_effect(self, resolution: ResolveEffectInput) -> None:
        # A refused update leaves nothing in history and the caller gets the reason.
        key = resolution.effect_key
        if self._answered_already(resolution):
            return
        if key not in self._awaiting_resolution:
            waiting = ", ".join(sorted(self._awaiting_resolution)) or "none"
            raise ValueError(f"this run is not waiting on effect {key!r} (waiting on: {waiting})")
        if key in self._resolutions:
            raise ValueError(f"effect {key!r} is already being resolved")
        problem = resolution_problem(resolution)
        if problem is not None:
            raise ValueError(problem)

    def _answered_already(self, resolution: ResolveEffectInput) -> bool:
        """The effect is not waiting, and its last answer was this one (same verdict and ref)."""
        previous = self._resolved.get(resolution.effect_key)
        return (
            resolution.effect_key not in self._awaiting_resolution
            and previous is not None
            and previous[0].resolution is resolution.resolution
            and previous[0].external_ref == resolution.external_ref
        )

    @staticmethod
    def _resolution_result(
        resolution: ResolveEffectInput, record: EffectRecord
    ) -> EffectResolutionResult:
        outcome = {
            EffectResolution.COMMITTED: "the run goes on without sending it",
            EffectResolution.NOT_COMMITTED: "it is dispatched again, once",
            EffectResolution.ABANDON: "the model is told it failed",
        }[resolution.resolution]
        return EffectResolutionResult(
            effect_key=resolution.effect_key,
            resolution=resolution.resolution,
            status=record.status,
            external_ref=record.external_ref,
            message=(
                f"effect {resolution.effect_key} resolved {resolution.resolution.value} by "
                f"{resolution.principal}: ledger {record.status.value}; {outcome}"
            ),
        )

    # -- governed tools: prepare in here, dispatch through the ledger -------------------

    def _policy(self, tool_name: str, declaration: EffectDeclaration | None) -> ToolPolicy:
        snapshot = self._spec.policy.get(tool_name)
        if snapshot is not None:
            return snapshot
        if declaration is not None:
            return ToolPolicy(
                effect_class=declaration.effect_class,
                approval=declaration.approval,
                send_within_s=declaration.send_within_s,
            )
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
        window = call.deadline - workflow.now()
        while True:
            try:
                outcome: EffectOutcome = await workflow.execute_activity(
                    EFFECT_DISPATCH_ACTIVITY,
                    EffectDispatchInput(call=call, max_attempts=EFFECT_MAX_ATTEMPTS),
                    result_type=EffectOutcome,
                    start_to_close_timeout=timedelta(seconds=self._spec.timeouts.tool_call_s),
                    heartbeat_timeout=timedelta(seconds=self._spec.timeouts.heartbeat_s),
                    retry_policy=_effect_retry(self._spec.timeouts.effect_retry_max_s),
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
                # The row is back to prepared: one more dispatch, with the whole window again
                # from the human's answer (the old deadline may have passed while they looked).
                call = call.model_copy(update={"deadline": workflow.now() + window})
                continue
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
        self._resolved[call.effect_key] = (resolution, record)
        self._transition(
            RunStatus.RUNNING,
            "EffectResolved",
            effect_key=call.effect_key,
            resolution=resolution.resolution.value,
            principal=resolution.principal,
        )
        return resolution, record
