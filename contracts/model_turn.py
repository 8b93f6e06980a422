"""The model-turn activity's boundary: references and new items in, output items and usage out."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

MODEL_TURN_ACTIVITY = "groundwork.model_turn"


class FunctionToolSpec(BaseModel):
    """What the model needs to know about a function tool (not how to run it)."""

    name: str
    description: str
    params_json_schema: dict[str, Any]
    strict_json_schema: bool = True


class HandoffSpec(BaseModel):
    tool_name: str
    tool_description: str
    input_json_schema: dict[str, Any]
    agent_name: str
    strict_json_schema: bool = True


class OutputSchemaSpec(BaseModel):
    output_type_name: str | None
    is_wrapped: bool
    json_schema: dict[str, Any] | None
    strict_json_schema: bool


class ModelTurnInput(BaseModel):
    """One model call. The transcript is `parent_ref` (stored in Postgres) plus `new_items`."""

    run_id: str
    step: int
    model_route: str
    agent_name: str
    system_instructions: str | None = None
    parent_ref: str | None = None
    """Ref of the transcript prefix already stored; None means new_items is the whole transcript."""
    new_items: list[dict[str, Any]] = Field(default_factory=list)
    new_item_hashes: list[str] = Field(default_factory=list)
    model_settings: dict[str, Any] = Field(default_factory=dict)
    tools: list[FunctionToolSpec] = Field(default_factory=list)
    handoffs: list[HandoffSpec] = Field(default_factory=list)
    output_schema: OutputSchemaSpec | None = None
    previous_response_id: str | None = None
    conversation_id: str | None = None
    context_digest: str | None = None
    """content_hash of turn_context(): instructions, settings, tools, handoffs, output schema."""
    context_elided: bool = False
    """True when those fields are left out because an earlier turn of this run stored them
    under context_digest; the activity reads them back by digest. They are the same every
    turn of an agent, and were ~60 % of a model turn's bytes in history."""


CONTEXT_FIELDS = ("system_instructions", "model_settings", "tools", "handoffs", "output_schema")


def turn_context(turn: ModelTurnInput) -> dict[str, Any]:
    """The part of a turn that is the agent's, not the conversation's, as JSON."""
    return turn.model_dump(mode="json", include=set(CONTEXT_FIELDS))


def elided(turn: ModelTurnInput, digest: str) -> ModelTurnInput:
    """The same turn with its context replaced by the digest it is stored under."""
    return turn.model_copy(
        update={
            "system_instructions": None, "model_settings": {}, "tools": [], "handoffs": [],
            "output_schema": None, "context_digest": digest, "context_elided": True,
        }
    )  # fmt: skip


class TurnUsage(BaseModel):
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


class ModelTurnResult(BaseModel):
    """The model's answer, plus the ref under which the transcript it saw is now stored."""

    output: list[dict[str, Any]]
    usage: TurnUsage = Field(default_factory=TurnUsage)
    response_id: str | None = None
    transcript_ref: str
    context_stored: str | None = None
    """The context digest this activity holds stored. Only then may later turns elide the
    context: a result recorded by older code (or an older worker mid-rollout) lacks it."""
