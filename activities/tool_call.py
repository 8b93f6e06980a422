"""The tool-call activity: the one place every tool call of every run passes through.

The effect gateway (prepare / claim / reconcile / settle) will sit here; today it runs the
user's own `FunctionTool` and keeps large outputs out of workflow history.
"""

from __future__ import annotations

import json
from typing import Any

from agents import Agent, FunctionTool
from agents.tool_context import ToolContext
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities._context import activity_logger
from activities._heartbeat import heartbeating
from adapters.transcripts import TranscriptStore
from contracts.hashing import blob_marker
from contracts.tool_call import (
    INLINE_OUTPUT_LIMIT,
    PREVIEW_CHARS,
    TOOL_CALL_ACTIVITY,
    ToolCallInput,
    ToolCallResult,
)
from definitions import catalog


def find_tool(agent: Agent[Any], tool_name: str, owner: str | None = None) -> FunctionTool | None:
    """The named tool in the agent's handoff graph; the owner's tool wins a name clash."""
    fallback: FunctionTool | None = None
    for current, tool in catalog.walk_tools(agent):
        if tool.name == tool_name:
            if owner is None or current.name == owner:
                return tool
            fallback = fallback or tool
    return fallback


def _as_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if hasattr(output, "model_dump_json"):
        return str(output.model_dump_json())
    try:
        return json.dumps(output, default=str)
    except (TypeError, ValueError):
        return str(output)


class ToolCallActivities:
    def __init__(self, transcripts: TranscriptStore) -> None:
        self._transcripts = transcripts
        self._agents: dict[str, Agent[Any]] = {}

    def _agent(self, name: str) -> Agent[Any]:
        agent = self._agents.get(name)
        if agent is None:
            agent = catalog.build(name)
            self._agents[name] = agent
        return agent

    @activity.defn(name=TOOL_CALL_ACTIVITY)
    async def tool_call(self, call: ToolCallInput) -> ToolCallResult:
        log = activity_logger(
            tool=call.tool_name, call_id=call.call_id, step=call.step, agent=call.owner_agent
        )
        try:
            tool = find_tool(self._agent(call.agent_name), call.tool_name, call.owner_agent)
        except catalog.UnknownAgentError as err:
            raise ApplicationError(str(err), type="UnknownAgent", non_retryable=True) from err
        if tool is None:
            return ToolCallResult(
                output=f"error: agent {call.agent_name} has no tool {call.tool_name!r}",
                output_bytes=0,
                error="unknown_tool",
            )
        context = ToolContext(
            context=None,
            tool_name=call.tool_name,
            tool_call_id=call.call_id,
            tool_arguments=call.arguments,
        )
        # FunctionTool.on_invoke_tool already turns the function's exceptions into the
        # model-visible error text its failure_error_function chooses.
        async with heartbeating():
            output = _as_text(await tool.on_invoke_tool(context, call.arguments))
        size = len(output.encode())
        if size <= INLINE_OUTPUT_LIMIT:
            log.info("tool_call", output_bytes=size, stored=False)
            return ToolCallResult(output=output, output_bytes=size)
        digest = await self._transcripts.put_blob(output)
        log.info("tool_call", output_bytes=size, stored=True, blob=digest)
        return ToolCallResult(
            output=blob_marker(digest, size, output[:PREVIEW_CHARS]),
            output_bytes=size,
            stored_ref=digest,
        )
