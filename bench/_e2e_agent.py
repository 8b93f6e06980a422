"""The e2e phase's agent: notes-writer's `publish_note` alone, as the peer's agent has one tool.

bench/effects.py loads it into its worker with GROUNDWORK_AGENTS (the way a user adds an
agent of their own). The built-in notes-writer also offers two reviewed-publish tools, so
each of its runs carries and handles three tool schemas where the peer's carries one; its
figure stays available with `--e2e-agent notes-writer`.
"""

from __future__ import annotations

from agents import Agent

from definitions.notes_writer import publish_note


def build_agent() -> Agent[None]:
    return Agent(
        name="note-publisher",
        instructions="Publish the note the user asks for with publish_note, then confirm.",
        tools=[publish_note],
    )
