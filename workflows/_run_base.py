"""What every part of a run shares: its state, its events, its status transitions."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

from contracts.approvals import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalStatus,
    Verdict,
)
from contracts.effects import (
    EffectRecord,
    ResolveEffectInput,
)
from contracts.run import (
    MAX_LAST_EVENTS,
    BudgetUsage,
    RunEvent,
    RunResult,
    RunSpec,
    RunState,
)
from contracts.search_attributes import (
    GW_AGENT,
    GW_RELEASE,
    GW_STATUS,
    GW_TENANT,
    GW_WAITING_REASON,
)
from contracts.status import FailureReason, RunStatus, WaitingReason, check_transition
from contracts.waits import (
    Delivery,
)

TOOL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
)
LOCAL_RETRY_THRESHOLD = TOOL_RETRY.initial_interval / 2
"""Below TOOL_RETRY's first backoff, so a local activity waits out every retry on a workflow
timer and each attempt is scheduled afresh. Backing off inside the worker instead (the SDK's
default for waits under a minute) leaves the failed attempt's start_to_close timer running
in temporalio 1.35's core (sdk-rust issue 1454): it timed the next attempt out at the failed
attempt's start + start_to_close, and it panics if it fires after the worker has shut down."""


class RunAbortedError(Exception):
    """Raised inside the SDK's loop when the run must end FAILED; see `_must_fail`."""


class BudgetExhaustedError(RunAbortedError):
    """Raised before an action the budget does not allow; ends the run FAILED(budget)."""


class RunBase:
    """State and bookkeeping the run's parts share; AgentRunWorkflow initialises it."""

    _spec: RunSpec
    _state: RunState
    _current_agent: str
    _must_fail: tuple[FailureReason, str] | None
    """Set where the run must end FAILED from inside the SDK's loop, which may wrap our
    exception (a tool's error becomes a UserError); run() honours it whatever surfaces."""
    _resolutions: dict[str, ResolveEffectInput]
    _awaiting_resolution: set[str]
    _resolved: dict[str, tuple[ResolveEffectInput, EffectRecord]]
    """The last resolution applied per effect key, with the ledger row it left."""
    _pending_approval: ApprovalRequest | None
    _granted: ApprovalDecision | None
    _decided: dict[str, Verdict]
    _latest_revision: dict[str, str]
    _ended: dict[str, tuple[ApprovalStatus, str, str]]
    """Approvals ended without a decision: id -> (superseded|revoked, by, reason)."""
    _approval_lock: asyncio.Lock
    _delivered: dict[str, dict[int, Delivery]]

    def _init_run_parts(self) -> None:
        """The mixins' state, empty; every workflow built on RunBase calls this in __init__."""
        self._must_fail = None
        self._resolutions = {}
        self._pending_approval = None
        self._granted = None
        self._decided = {}
        self._latest_revision = {}
        self._ended = {}
        self._approval_lock = asyncio.Lock()
        self._delivered = {}
        self._awaiting_resolution = set()
        self._resolved = {}

    def _exhaust(self, message: str) -> BudgetExhaustedError:
        self._must_fail = (FailureReason.BUDGET, message)
        return BudgetExhaustedError(message)

    def _abort(self, reason: FailureReason, message: str) -> NoReturn:
        """End the run FAILED from inside a tool or model call (see `_must_fail`)."""
        self._must_fail = (reason, message)
        raise RunAbortedError(message)

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
        wanted = (
            (GW_STATUS, target.value),
            (GW_WAITING_REASON, waiting_reason.value if waiting_reason else ""),
            (GW_AGENT, self._spec.release.agent),
            (GW_TENANT, self._spec.tenant),
            (GW_RELEASE, self._spec.release.release_id),
        )
        # Only what changed: the start set agent, tenant and release (workers.run_client),
        # and every upserted value is one more visibility write on the server.
        current = workflow.info().typed_search_attributes
        changed = [key.value_set(value) for key, value in wanted if current.get(key) != value]
        if changed:
            workflow.upsert_search_attributes(changed)
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
