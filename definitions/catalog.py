"""The agents a worker serves, by name. A Run's release names one of them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agents import Agent

from definitions import filler, notes_writer, source_reader, triage

AgentFactory = Callable[[], Agent[Any]]

CATALOG: Mapping[str, AgentFactory] = {
    "source-reader": source_reader.build_agent,
    "filler": filler.build_agent,
    "triage": triage.build_agent,
    "notes-writer": notes_writer.build_agent,
}


class UnknownAgentError(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(
            f"unknown agent {name!r}; this worker serves: {', '.join(sorted(CATALOG))}"
        )


def build(name: str) -> Agent[Any]:
    factory = CATALOG.get(name)
    if factory is None:
        raise UnknownAgentError(name)
    return factory()
