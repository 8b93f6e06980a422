"""Run status and the legal-transition table (seed 001: transitions are data, not a diagram)."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a Run is in its lifecycle; the value is what the GwStatus search attribute holds."""

    CREATED = "Created"
    RUNNING = "Running"
    WAITING = "Waiting"
    SUSPENDED = "Suspended"
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELLED = "Cancelled"
    TIMED_OUT = "TimedOut"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


class WaitingReason(StrEnum):
    """Why a WAITING run waits; the status stays one value so the state machine does not explode."""

    APPROVAL = "approval"
    EVENT = "event"
    EFFECT_UNKNOWN = "effect_unknown"


class FailureReason(StrEnum):
    """Why a run ended FAILED; machine-readable, stable across releases."""

    BUDGET = "budget"
    MODEL_ERROR = "model_error"
    TOOL_ERROR = "tool_error"
    AGENT_ERROR = "agent_error"
    UNVERIFIED = "unverified"
    APPROVAL_EXPIRED = "approval_expired"
    REJECTED = "rejected"
    """An approver rejected what the run would have done; nothing was done."""
    EVIDENCE_INCOMPLETE = "evidence_incomplete"
    """A required research branch failed or timed out under the `fail` policy."""
    INTERNAL = "internal"


TERMINAL_STATUSES: frozenset[RunStatus] = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT}
)

LEGAL_TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.CREATED: frozenset({RunStatus.RUNNING, RunStatus.CANCELLED, RunStatus.FAILED}),
    RunStatus.RUNNING: frozenset(
        {
            RunStatus.WAITING,
            RunStatus.SUSPENDED,
            RunStatus.COMPLETED,
            RunStatus.FAILED,
            RunStatus.CANCELLED,
            RunStatus.TIMED_OUT,
        }
    ),
    RunStatus.WAITING: frozenset(
        {RunStatus.RUNNING, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT}
    ),
    RunStatus.SUSPENDED: frozenset({RunStatus.RUNNING, RunStatus.FAILED, RunStatus.CANCELLED}),
    RunStatus.COMPLETED: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
    RunStatus.TIMED_OUT: frozenset(),
}


class IllegalTransitionError(ValueError):
    """A status change that the transition table does not allow."""

    def __init__(self, current: RunStatus, target: RunStatus) -> None:
        self.current = current
        self.target = target
        allowed = ", ".join(sorted(s.value for s in LEGAL_TRANSITIONS[current])) or "none"
        super().__init__(
            f"illegal run transition {current.value} -> {target.value} (allowed from {current.value}: {allowed})"
        )


def check_transition(current: RunStatus, target: RunStatus) -> None:
    """Raise IllegalTransitionError unless current -> target is in the table."""
    if target not in LEGAL_TRANSITIONS[current]:
        raise IllegalTransitionError(current, target)
