"""The agents a worker serves, by name. A Run's release names one of them.

The built-in agents are listed here; a deployment adds its own with GROUNDWORK_AGENTS
(`load`), in every process that starts runs or executes them: the worker, the trigger
service and the CLI's `run start`. Both sets are read at start and never change after it,
so a workflow that builds its agent inside the sandbox sees the same catalog on replay.
"""

from __future__ import annotations

import importlib
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

BUILT_IN: Mapping[str, AgentFactory] = {
    "source-reader": source_reader.build_agent,
    "filler": filler.build_agent,
    "triage": triage.build_agent,
    "notes-writer": notes_writer.build_agent,
    "watcher": watcher.build_agent,
    "repo-researcher": repo_researcher.build_agent,
    "editor": editor.build_editor,
    "publisher": editor.build_publisher,
}

_loaded: dict[str, AgentFactory] = {}
"""Agents a deployment added with `load`, by name."""


class UnknownAgentError(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown agent {name!r}; this worker serves: {', '.join(names())}")


class AgentLoadError(ValueError):
    """An entry of GROUNDWORK_AGENTS cannot serve as an agent; nothing of it was added."""


def names() -> list[str]:
    return sorted({*BUILT_IN, *_loaded})


def has(name: str) -> bool:
    return name in BUILT_IN or name in _loaded


def build(name: str) -> Agent[Any]:
    factory = BUILT_IN.get(name) or _loaded.get(name)
    if factory is None:
        raise UnknownAgentError(name)
    return factory()


def load(entries: Mapping[str, str]) -> list[str]:
    """Add agents from `{"name": "package.module:factory"}`; the factory takes no argument
    and returns an `agents.Agent`. Each one is imported and built once here, and its tools'
    policy derived, so a wrong path, a factory that fails or a broken tool declaration stops
    the process at start instead of failing runs later. All or nothing. Whether a run could
    govern every tool (function tools only, no MCP servers) is the workflow gateway's rule;
    `cli._common.load_agents` applies it after this, before the process serves anything.

    Loading the same entries again is a no-op (a CLI command and the worker it starts may
    both load them); a name that is built in, or already loaded from another path, is refused.
    """
    staged: dict[str, AgentFactory] = {}
    for name, path in entries.items():
        factory = _resolve(name, path)
        if name in BUILT_IN:
            raise AgentLoadError(f"agent {name!r} ({path}) is built in; choose another name")
        if name in _loaded and _loaded[name] is not factory:
            raise AgentLoadError(f"agent {name!r} is already loaded from another factory")
        try:
            agent = factory()
        except Exception as err:
            raise AgentLoadError(f"agent {name!r}: {path}() failed: {err}") from err
        if not isinstance(agent, Agent):
            raise AgentLoadError(
                f"agent {name!r}: {path}() returned {type(agent).__name__}, not an agents.Agent"
            )
        try:
            _policy_of(agent)
        except Exception as err:
            raise AgentLoadError(f"agent {name!r}: its tools cannot be governed: {err}") from err
        staged[name] = factory
    _loaded.update(staged)
    return sorted(staged)


def _resolve(name: str, path: str) -> AgentFactory:
    if not name or name != name.strip():
        raise AgentLoadError(f"agent name {name!r} must be non-empty, without spaces around it")
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise AgentLoadError(f"agent {name!r}: {path!r} is not 'package.module:factory'")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # ImportError, or the module's own error at import
        raise AgentLoadError(f"agent {name!r}: cannot import {module_name}: {err}") from err
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise AgentLoadError(f"agent {name!r}: {module_name} has no callable {attr!r}")
    return factory  # type: ignore[no-any-return]


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
    return _policy_of(build(name))


def _policy_of(agent: Agent[Any]) -> dict[str, ToolPolicy]:
    snapshot: dict[str, ToolPolicy] = {}
    for _, tool in walk_tools(agent):
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
