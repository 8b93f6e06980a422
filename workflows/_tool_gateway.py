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


class UngovernableToolError(ValueError):
    """A tool that would run outside the tool-call activity (hosted or custom tools)."""


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
        if original.mcp_servers:
            raise UngovernableToolError(
                f"agent {original.name!r} uses MCP servers, whose tools would run inside the "
                "workflow; wrap them as function tools instead"
            )
        clone = original.clone(model=None)
        copies[id(original)] = clone  # before recursing: handoff graphs may have cycles
        clone.tools = [_wrap(original.name, tool, invoke) for tool in original.tools]
        clone.handoffs = [copy(h) if isinstance(h, Agent) else h for h in original.handoffs]
        return clone

    return copy(agent)


def _wrap(agent_name: str, tool: Any, invoke: ToolInvoker) -> Any:
    if not isinstance(tool, FunctionTool):
        raise UngovernableToolError(
            f"agent {agent_name!r} has tool {getattr(tool, 'name', tool)!r} "
            f"({type(tool).__name__}); a Groundwork run accepts only function tools, "
            "so that every call passes the tool-call activity"
        )

    async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> str:
        return await invoke(agent_name, tool, ctx, arguments)

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)
