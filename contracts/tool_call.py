"""The tool-call activity's boundary: every tool call of every run passes through it."""

from __future__ import annotations

from pydantic import BaseModel

from contracts.run import EffectClass

TOOL_CALL_ACTIVITY = "groundwork.tool_call"
LOCAL_READS_PATCH = "read-tools-as-local-activities"
"""Workflow patch id: runs started before it replay their read calls as ordinary activities."""
INLINE_OUTPUT_LIMIT = 2048
"""Tool outputs longer than this (bytes) are stored in Postgres and referenced from history."""
PREVIEW_CHARS = 240


class ToolCallInput(BaseModel):
    run_id: str
    step: int
    agent_name: str
    """The catalog name of the run's agent (the root of its handoff graph)."""
    owner_agent: str | None = None
    """The agent in that graph whose tool this is (after a handoff it is not the root)."""
    tool_name: str
    call_id: str
    arguments: str
    """The raw JSON arguments the model produced."""
    effect_class: EffectClass = EffectClass.READ


class ToolCallResult(BaseModel):
    """The output the model sees: inline when small, a blob marker plus a preview when large."""

    output: str
    output_bytes: int
    stored_ref: str | None = None
    error: str | None = None
    """Set when the tool raised; the model still sees `output` (an error text)."""
