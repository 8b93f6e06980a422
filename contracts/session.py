"""The Session: one entity workflow per (tenant, session id) that serializes its runs.

Commands reach it as the `command` signal (the trigger sends it with signal-with-start);
steers reach the active run as its `steer` signal, and the run acknowledges each one it
applied with the session's `steer_applied` signal. Every payload is a model here.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from contracts.run import RunSpec

SESSION_WORKFLOW_TYPE = "Session"
SESSION_ID_PREFIX = "session-"
COMMAND_SIGNAL = "command"
STEER_SIGNAL = "steer"
STEER_APPLIED_SIGNAL = "steer_applied"
MAX_COMPLETED_RUNS = 50
"""Ended runs the session's state lists (newest last); older ones are in Temporal's history."""
MAX_REMEMBERED_INPUTS = 1000
"""Inputs whose outcome the session remembers across continue-as-new (for dedupe and GET)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


def session_workflow_id(tenant: str, session_id: str) -> str:
    """`session-<tenant>-<session>-<hash>`: readable, and unique per (tenant, session id).

    Both parts are sanitized for the Web UI; the hash of the raw pair keeps two tenants (or
    two ids that sanitize alike) from ever sharing a session workflow.
    """
    digest = hashlib.sha256(f"{tenant}\x00{session_id}".encode()).hexdigest()[:12]
    readable = f"{_UNSAFE.sub('_', tenant)[:40]}-{_UNSAFE.sub('_', session_id)[:80]}"
    return f"{SESSION_ID_PREFIX}{readable}-{digest}"


class SessionMode(StrEnum):
    """What a command asks of a busy session (the ActivationPolicy's session dispositions)."""

    ENQUEUE = "ENQUEUE"
    """Run after everything queued before it."""
    STEER = "STEER"
    """Reach the active run as a user message before its next model turn; else run as ENQUEUE."""
    INTERRUPT = "INTERRUPT"
    """Cancel the active run and run next, ahead of the queue."""


class SessionCommand(BaseModel):
    """One accepted input for the session; `spec` is the run it becomes if it runs."""

    model_config = ConfigDict(extra="forbid")

    input_id: str = Field(min_length=1, max_length=128)
    """The input's public id; the session deduplicates on it."""
    mode: SessionMode
    spec: RunSpec
    """Its run id derives from the input id, so a redelivered command never makes a second run."""
    text: str = Field(min_length=1)
    """What a steer injects (the input's `data.text`, else its data as JSON)."""
    principal: str = "unknown"


class InputState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    ENDED = "ended"
    """Its own run ended; `run_status` says how."""
    STEER_SENT = "steer_sent"
    """Signalled to the active run, not yet applied."""
    STEERED = "steered"
    """Injected into `run_id` before its model turn `step`."""
    DUPLICATE_RUN = "duplicate_run"
    """A run with its run id already existed (a redelivery after the session forgot it)."""
    UNKNOWN = "unknown"
    """The session has not seen it (yet), or forgot it after continue-as-new."""


class SessionInputStatus(BaseModel):
    """What became of one input in its session; `run_id` is its own run or the run it steered."""

    input_id: str
    mode: SessionMode
    state: InputState
    run_id: str
    run_status: str | None = None
    step: int | None = None
    note: str = ""
    """Why it went where it went, e.g. "queued: no active run to steer"."""


class SteerInput(BaseModel):
    """The AgentRun's `steer` signal: text injected as a user message before the next turn."""

    model_config = ConfigDict(extra="forbid")

    input_id: str
    text: str = Field(min_length=1)
    principal: str = "unknown"
    reply_to: str | None = None
    """Workflow id to send `steer_applied` to once the text is in the transcript."""


class SteerApplied(BaseModel):
    input_id: str
    run_id: str
    step: int


class ActiveRun(BaseModel):
    run_id: str
    input_id: str
    mode: SessionMode
    started_at: datetime
    steers: list[str] = Field(default_factory=list)
    """Input ids of the steers sent to it."""
    interrupted_by: str | None = None


class SessionRun(BaseModel):
    """A run the session ran, once it ended."""

    run_id: str
    input_id: str
    mode: SessionMode
    status: str
    """A RunStatus value, or `Terminated` when the run was terminated from outside."""
    started_at: datetime
    ended_at: datetime
    interrupted_by: str | None = None
    steers: list[str] = Field(default_factory=list)


class QueuedRun(BaseModel):
    input_id: str
    mode: SessionMode
    run_id: str
    note: str = ""


class SessionCarry(BaseModel):
    """What a session carries into its next execution when it continues as new."""

    queue: list[SessionCommand] = Field(default_factory=list)
    completed: list[SessionRun] = Field(default_factory=list)
    inputs: dict[str, SessionInputStatus] = Field(default_factory=dict)
    runs_started: int = 0
    executions: int = 1


class SessionStart(BaseModel):
    """The Session workflow's input."""

    model_config = ConfigDict(extra="forbid")

    tenant: str
    session_id: str
    carry: SessionCarry | None = None
    runs_per_execution: int = Field(default=200, ge=1)
    """Continue as new after this many runs, or sooner when Temporal suggests it."""


class SessionState(BaseModel):
    """What the session's `get_state` query answers."""

    session_id: str
    tenant: str
    workflow_id: str
    active: ActiveRun | None
    queue: list[QueuedRun]
    completed: list[SessionRun]
    runs_started: int
    executions: int
    """How many executions (continue-as-new generations) this session has had."""
