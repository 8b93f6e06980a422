"""A benchmark agent whose one read tool answers exactly `size` bytes: transcript growth on demand."""

from __future__ import annotations

from agents import Agent, function_tool

MAX_SIZE = 4 * 1024 * 1024


@function_tool
async def produce(size: int, seed: int = 0) -> str:
    """Return exactly `size` bytes of deterministic ASCII text.

    Args:
        size: How many bytes to return (at most 4 MiB).
        seed: Varies the text so outputs are not all identical.
    """
    size = max(0, min(size, MAX_SIZE))
    unit = f"filler-{seed}-"
    return (unit * (size // len(unit) + 1))[:size]


def build_agent() -> Agent[None]:
    return Agent(
        name="filler",
        instructions="Call produce as asked, then answer briefly.",
        tools=[produce],
    )
