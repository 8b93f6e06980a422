"""What a long run hands to its next execution when it continues as new.

A run's history grows by some ten events per tool turn; Temporal limits a history to 50K
events and 50 MiB and slows down well before that (it suggests continuing as new from 4K
events or 4 MiB). So between two model turns, past `RunSpec.continue_as_new_after_events`
or when Temporal suggests it, the run closes this execution and starts the next one under
the same workflow id with this carry-over: the transcript by reference (plus the few items
not stored yet), the state `get_state` answers, and whatever makes repeated signals and
updates idempotent. Nothing here grows with the transcript.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from contracts.approvals import ApprovalStatus, Verdict
from contracts.effects import EffectRecord, ResolveEffectInput
from contracts.run import RunState
from contracts.session import SteerInput
from contracts.waits import Delivery

CONTINUE_AS_NEW_PATCH = "runs-continue-as-new"
"""Workflow patch id, recorded when a run first continues: a run whose history was recorded
before runs could continue goes on as it was recorded instead of continuing mid-replay."""

RESUMED_MARKER = "groundwork: transcript continued from"
"""Begins the text of the one input item that stands for the stored transcript in a continued
execution's loop; the model stub sends the stored reference in its place, so no model sees it."""


def resumed_marker(transcript_ref: str) -> dict[str, Any]:
    return {"role": "user", "content": f"[{RESUMED_MARKER} {transcript_ref}]"}


class RunCarryOver(BaseModel):
    """The second argument of AgentRunWorkflow in every execution after the first."""

    execution: int = Field(ge=2)
    """Which execution of the run this is (the first has no carry-over)."""
    state: RunState
    agent: str
    """Name (`Agent.name`) of the agent the loop was running when the run continued."""
    transcript_ref: str
    """Everything the model has seen up to the last turn, stored."""
    pending_items: list[dict[str, Any]] = Field(default_factory=list)
    """Items after the stored transcript: the last turn's tool outputs, injected steers."""
    tools_used_by: list[str] = Field(default_factory=list)
    """Agents that have called a tool or a handoff: the SDK stops forcing their `tool_choice`."""
    steers: list[SteerInput] = Field(default_factory=list)
    """Steers received and not injected yet."""
    steers_seen: list[str] = Field(default_factory=list)
    decided: dict[str, Verdict] = Field(default_factory=dict)
    latest_revision: dict[str, str] = Field(default_factory=dict)
    ended: dict[str, tuple[ApprovalStatus, str, str]] = Field(default_factory=dict)
    resolved: dict[str, tuple[ResolveEffectInput, EffectRecord]] = Field(default_factory=dict)
    delivered: dict[str, dict[int, Delivery]] = Field(default_factory=dict)
