"""The gateway copies agents so every function tool call goes to one invoker, and refuses
tools that would run anywhere else."""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, FunctionTool, WebSearchTool, function_tool

from workflows._tool_gateway import UngovernableToolError, govern


@function_tool
def ping(x: int) -> str:
    """Ping.

    Args:
        x: a number.
    """
    return f"pong {x}"


async def _never(*_: Any) -> str:
    raise AssertionError("not called in this test")


def test_every_function_tool_is_rewired_and_handoff_cycles_are_kept() -> None:
    a: Agent[None] = Agent(name="a", tools=[ping])
    b: Agent[None] = Agent(name="b", tools=[ping], handoffs=[a])
    a.handoffs = [b]
    governed = govern(a, _never)
    assert governed is not a
    tool = governed.tools[0]
    assert isinstance(tool, FunctionTool)
    assert tool.on_invoke_tool is not ping.on_invoke_tool
    assert ping.on_invoke_tool is a.tools[0].on_invoke_tool  # the original is untouched
    other = governed.handoffs[0]
    assert isinstance(other, Agent)
    assert other.handoffs[0] is governed


def test_hosted_tools_are_refused() -> None:
    with pytest.raises(UngovernableToolError, match="only function tools"):
        govern(Agent(name="web", tools=[WebSearchTool()]), _never)
