"""AgentInput: the one envelope every input arrives in (DESIGN.md "Trigger service").

Principal, tenant and trust come from authentication, never from the payload, so they are
not fields a client can send.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.session import SessionInputStatus

SCHEMA_VERSION = "agent-input/1"


class InputKind(StrEnum):
    COMMAND = "command"
    EVENT = "event"
    CONTEXT = "context"
    CONTROL = "control"


class Disposition(StrEnum):
    PENDING = "pending"
    IGNORE = "IGNORE"
    PROJECT = "PROJECT"
    ACTIVATE = "ACTIVATE"
    ENQUEUE = "ENQUEUE"
    STEER = "STEER"
    INTERRUPT = "INTERRUPT"
    RESUME = "RESUME"
    FORK = "FORK"


class AgentInput(BaseModel):
    """What a client posts to POST /v1/inputs."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal["agent-input/1"] = "agent-input/1"
    id: str | None = Field(
        default=None, max_length=128, description="Client's own id for the input, if any."
    )
    source_event_id: str = Field(
        min_length=1, max_length=256, description="Dedupe key within (tenant, source)."
    )
    kind: InputKind
    type: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-]+$")
    source: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:/\-]+$")
    subject: str = Field(min_length=1, max_length=256)
    target: str | None = Field(
        default=None,
        max_length=256,
        description="A run id, session id or agent; ENQUEUE, STEER and INTERRUPT use it as "
        "the session id (the subject when absent).",
    )
    occurred_at: datetime | None = None
    correlation_id: str | None = Field(default=None, max_length=128)
    causation_id: str | None = Field(default=None, max_length=128)
    data_content_type: Literal["application/json"] = "application/json"
    data: dict[str, Any] = Field(default_factory=dict)


class Caller(BaseModel):
    """Who posted, as authentication established it."""

    tenant: str
    principal: str
    roles: list[str] = Field(default_factory=list)
    trust: Literal["trusted", "untrusted"] = "trusted"


class InputAccepted(BaseModel):
    input_id: str
    duplicate: bool = False


class InputRecord(BaseModel):
    """GET /v1/inputs/{id}: the envelope as stored, and what became of it."""

    input_id: str
    tenant: str
    kind: InputKind
    type: str
    source: str
    subject: str
    source_event_id: str | None
    target: str | None
    principal: str | None
    trust: str
    disposition: Disposition
    activation_refs: list[dict[str, Any]]
    """What activation did: the run it started, the session it went to, the deliveries."""
    run_refs: list[str] = Field(default_factory=list)
    """Run ids this input started or steered (a session input's as its session reports it)."""
    session: SessionInputStatus | None = None
    """For ENQUEUE / STEER / INTERRUPT: where the input is in its session, live."""
    data: dict[str, Any]
    logged_at: datetime
