"""The agents a worker serves, by name. A Run's release names one of them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from agents import Agent, FunctionTool

from contracts.run import EffectClass, ToolPolicy
from definitions import (
    editor,
    filler,
    notes_writer,
    repo_researcher,
    source_reader,
    triage,
    watcher,
)
from definitions.governed import effect_of, execution_of

AgentFactory = Callable[[], Agent[Any]]

CATALOG: Mapping[str, AgentFactory] = {
    "source-reader": source_reader.build_agent,
    "filler": filler.build_agent,
    "triage": triage.build_agent,
    "notes-writer": notes_writer.build_agent,
    "watcher": watcher.build_agent,
    "repo-researcher": repo_researcher.build_agent,
    "editor": editor.build_editor,
    "publisher": editor.build_publisher,
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


def walk_tools(agent: Agent[Any]) -> Iterator[tuple[Agent[Any], FunctionTool]]:
    """Every function tool of the agent and of the agents it hands off to, with its owner."""
    seen: set[int] = set()
    stack: list[Agent[Any]] = [agent]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for tool in current.tools:
            if isinstance(tool, FunctionTool):
                yield current, tool
        stack.extend(h for h in current.handoffs if isinstance(h, Agent))


def policy_snapshot(name: str) -> dict[str, ToolPolicy]:
    """Tool -> effect class, allowed, approval, execution, as the agent's definition declares them.

    Pinned into the RunSpec when a run starts, so a later change of the definition does not
    change what a running run is allowed to do.
    """
    snapshot: dict[str, ToolPolicy] = {}
    for _, tool in walk_tools(build(name)):
        declaration = effect_of(tool)
        if declaration is None:
            snapshot[tool.name] = ToolPolicy(
                effect_class=EffectClass.READ, execution=execution_of(tool)
            )
        else:
            snapshot[tool.name] = ToolPolicy(
                effect_class=declaration.effect_class,
                approval=declaration.approval,
                send_within_s=declaration.send_within_s,
            )
    return snapshot
