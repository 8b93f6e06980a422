"""A triage agent that hands off to a reporter with structured output: handoffs and
`output_type` run unchanged inside a durable run."""

from __future__ import annotations

from agents import Agent
from pydantic import BaseModel, Field

from definitions.source_reader import read_definition, search_source


class SourceAnswer(BaseModel):
    """Where something is defined, as the reporter must answer."""

    path: str = Field(description="File path relative to the package.")
    line: int = Field(description="1-based line of the definition.")
    summary: str


def build_agent() -> Agent[None]:
    reporter: Agent[None] = Agent(
        name="reporter",
        instructions="Find the definition with the tools, then answer as SourceAnswer.",
        tools=[search_source, read_definition],
        output_type=SourceAnswer,
    )
    return Agent(
        name="triage",
        instructions="Hand questions about source code to the reporter.",
        handoffs=[reporter],
    )
