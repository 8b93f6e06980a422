"""Effects: what prepare decides in the workflow, what dispatch reports, what the ledger holds."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

from contracts.run import EffectClass

EFFECT_DISPATCH_ACTIVITY = "groundwork.effect_dispatch"
EFFECT_RESOLVE_ACTIVITY = "groundwork.effect_resolve"
MAX_EFFECT_KEY = 512


class EffectStatus(StrEnum):
    PREPARED = "prepared"
    DISPATCHING = "dispatching"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"
    CONFLICT = "conflict"
    REQUIRES_HUMAN = "requires_human"


class Classification(StrEnum):
    """What a dispatch outcome means for retrying (seed 000 ToolRuntime.classify)."""

    RETRY = "retry"
    DO_NOT_RETRY = "do_not_retry"
    RECONCILE_FIRST = "reconcile_first"
    HUMAN_RESOLUTION = "human_resolution"


class PreparedCall(BaseModel):
    """A tool call authorized against the policy snapshot, ready to dispatch."""

    kind: Literal["prepared"] = "prepared"
    run_id: str
    agent_name: str
    owner_agent: str | None = None
    tool_name: str
    call_id: str
    effect_class: EffectClass
    target: str
    effect_key: str = Field(min_length=1, max_length=MAX_EFFECT_KEY)
    request_hash: str
    arguments: dict[str, Any]
    deadline: datetime
    domain_event: str = "EffectCommitted"


class Denied(BaseModel):
    kind: Literal["denied"] = "denied"
    tool_name: str
    reason: str


class NeedsApproval(BaseModel):
    kind: Literal["needs_approval"] = "needs_approval"
    tool_name: str
    effect_key: str
    request_hash: str


class EffectDispatchInput(BaseModel):
    call: PreparedCall
    max_attempts: int
    """The activity's retry limit: its last attempt hands `unknown` to a human instead of raising."""


class EffectOutcome(BaseModel):
    """What the dispatch activity reports; the workflow turns it into the model's tool result."""

    effect_key: str
    status: EffectStatus
    classification: Classification
    external_ref: str | None = None
    receipt: dict[str, Any] | None = None
    message: str = ""
    replayed: bool = False
    """True when the ledger already held the success and nothing was dispatched now."""
    attempt: int = 0


class EffectResolution(StrEnum):
    COMMITTED = "committed"
    NOT_COMMITTED = "not_committed"
    ABANDON = "abandon"


class ResolveEffectInput(BaseModel):
    """A human says what happened at the target: the `resolve_effect` signal (what
    `temporal workflow signal` sends) or the `decide_effect` update (CLI and HTTP)."""

    effect_key: str
    resolution: EffectResolution
    external_ref: str | None = None
    principal: str = "unknown"
    note: str = ""


class EffectResolutionResult(BaseModel):
    """The `decide_effect` update's answer, once the ledger has recorded the resolution."""

    effect_key: str
    resolution: EffectResolution
    status: EffectStatus
    """The ledger row's status after it: succeeded, prepared (dispatched again) or failed."""
    external_ref: str | None = None
    message: str


def resolution_problem(resolution: ResolveEffectInput) -> str | None:
    """Why this answer cannot be taken whatever the run's state, or None."""
    if resolution.resolution is EffectResolution.COMMITTED and not resolution.external_ref:
        return "a committed effect needs its external_ref: where it is at the target"
    return None


class EffectResolveActivityInput(BaseModel):
    run_id: str
    resolution: ResolveEffectInput
    domain_event: str = "EffectCommitted"


class EffectRecord(BaseModel):
    """One row of the effects table, as the CLI and API show it."""

    effect_key: str
    run_id: str
    tool_name: str
    target: str
    effect_class: EffectClass
    request_hash: str
    status: EffectStatus
    attempt: int
    fence: int
    external_ref: str | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    request: dict[str, Any] | None = None
    receipt: dict[str, Any] | None = None


class EffectAttempt(BaseModel):
    attempt: int
    fence: int
    activity_attempt: int | None
    phase: str
    outcome: str | None
    detail: dict[str, Any]
    at: datetime


def recorded_answer(attempts: list[EffectAttempt]) -> ResolveEffectInput | None:
    """The last human answer the ledger holds for an effect (its `resolve` attempt rows)."""
    for attempt in reversed(attempts):
        if attempt.phase == "resolve":
            return ResolveEffectInput.model_validate(attempt.detail)
    return None


def answer_after_run_ended(
    run_id: str,
    asked: ResolveEffectInput,
    record: EffectRecord | None,
    recorded: ResolveEffectInput | None,
) -> EffectResolutionResult | str:
    """A resolve that reaches a run which has already ended: typically a client retrying
    after the first answer's response was lost, while the run went on and completed. The
    recorded result if the ledger holds this very answer (same verdict and ref, as the
    running workflow judges a repeat), else why it is refused. Nothing is written either way."""
    key = asked.effect_key
    if record is None or record.run_id != run_id:
        return f"run {run_id} has ended and has no effect {key!r}; nothing was changed"
    if recorded is None:
        return (
            f"run {run_id} has ended; effect {key} is {record.status.value} and no one "
            "resolved it; nothing was changed"
        )
    by = f"resolved {recorded.resolution.value} by {recorded.principal}"
    if recorded.resolution is asked.resolution and recorded.external_ref == asked.external_ref:
        return EffectResolutionResult(
            effect_key=key,
            resolution=recorded.resolution,
            status=record.status,
            external_ref=record.external_ref,
            message=(
                f"effect {key} was already {by}: ledger {record.status.value}; "
                f"run {run_id} has ended since"
            ),
        )
    return (
        f"run {run_id} has ended; effect {key} was {by} (ledger {record.status.value}); "
        "nothing was changed"
    )
