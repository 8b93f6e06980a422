"""`wait_for_event`: a built-in tool that suspends the run durably until an input arrives.

Give it to any agent. In a Groundwork run it never executes as a function: the run
subscribes (type, subject), releases its worker slot, and resumes when a matching input is
logged (`groundwork input submit`, or the trigger service), or when the timeout passes.
"""

from __future__ import annotations

from typing import Any

from agents import function_tool

_ATTRIBUTE = "_groundwork_wait"


@function_tool
async def wait_for_event(type: str, subject: str, timeout_s: int = 3600) -> str:
    """Wait until an event of this type about this subject arrives, then return its data.

    Args:
        type: The event type, e.g. "deploy.finished".
        subject: What the event is about, e.g. "service-a".
        timeout_s: Give up after this many seconds.
    """
    raise RuntimeError("wait_for_event runs only inside a Groundwork run")


setattr(wait_for_event, _ATTRIBUTE, True)


def is_wait_tool(tool: Any) -> bool:
    return getattr(tool, _ATTRIBUTE, False) is True
