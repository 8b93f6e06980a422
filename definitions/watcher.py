"""An agent that waits for a deployment to finish and reports it: a durable wait in action."""

from __future__ import annotations

from agents import Agent

from definitions.waits import wait_for_event


def build_agent() -> Agent[None]:
    return Agent(
        name="watcher",
        instructions="Wait for the event the user names with wait_for_event, then report what it said.",
        tools=[wait_for_event],
    )
