"""Rewrite a user's agent so every function tool call becomes one tool-call activity."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agents import Agent, FunctionTool
    from agents.tool_context import ToolContext

ToolInvoker = Callable[[str, FunctionTool, ToolContext[Any], str], Awaitable[str]]


def govern(agent: Agent[Any], invoke: ToolInvoker) -> Agent[Any]:
    """A copy of the agent (and every agent it hands off to) whose tools call `invoke`.

    The model is cleared so the run's model provider (the route in the RunSpec) answers
    every turn, whatever model the definition names.
    """
    copies: dict[int, Agent[Any]] = {}

    def copy(original: Agent[Any]) -> Agent[Any]:
        existing = copies.get(id(original))
        if existing is not None:
            return existing
        clone = original.clone(model=None)
        copies[id(original)] = clone  # before recursing: handoff graphs may have cycles
        clone.tools = [_wrap(original.name, tool, invoke) for tool in original.tools]
        clone.handoffs = [copy(h) if isinstance(h, Agent) else h for h in original.handoffs]
        return clone

    return copy(agent)


def _wrap(agent_name: str, tool: Any, invoke: ToolInvoker) -> Any:
    if not isinstance(tool, FunctionTool):
        return tool  # rejected when the model stub builds the turn: no call may bypass the gateway

    async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> str:
        return await invoke(agent_name, tool, ctx, arguments)

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)
