"""`groundwork agent list`: the agents this installation serves and what their tools may do."""

from __future__ import annotations

import json

import typer
from pydantic import BaseModel

from cli._common import console, load_agents, make_table, settings
from contracts.run import ApprovalRule, EffectClass
from definitions import catalog


class ToolEntry(BaseModel):
    effect_class: EffectClass
    approval: ApprovalRule


class AgentEntry(BaseModel):
    agent: str
    source: str
    """"built-in", or the GROUNDWORK_AGENTS path it was loaded from."""
    tools: dict[str, ToolEntry]


agent_app = typer.Typer(
    no_args_is_help=True, help="The agent catalog (built in + GROUNDWORK_AGENTS)."
)


@agent_app.callback()
def _group() -> None:
    """The agent catalog (built in + GROUNDWORK_AGENTS)."""


@agent_app.command("list")
def list_agents(as_json: bool = typer.Option(False, "--json")) -> None:
    """Each agent with its tools' effect class and approval rule, as a run would pin them."""
    config = settings("WARNING")
    load_agents(config)
    rows = [
        AgentEntry(
            agent=name,
            source="built-in" if name in catalog.BUILT_IN else config.agents[name],
            tools={
                tool: ToolEntry(effect_class=policy.effect_class, approval=policy.approval)
                for tool, policy in catalog.policy_snapshot(name).items()
            },
        )
        for name in catalog.names()
    ]
    if as_json:
        console.print_json(json.dumps([row.model_dump(mode="json") for row in rows]))
        return
    table = make_table("agent", "source", "tools (effect class, approval)")
    for row in rows:
        tools = ", ".join(
            f"{tool} ({entry.effect_class.value}"
            f"{', approval' if entry.approval is ApprovalRule.ALWAYS else ''})"
            for tool, entry in row.tools.items()
        )
        table.add_row(row.agent, row.source, tools or "-")
    console.print(table)
