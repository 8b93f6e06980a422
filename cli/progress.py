"""Follow a run: print its events as they happen, then its outcome."""

from __future__ import annotations

import asyncio
from typing import Any

from rich.console import Console
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError

from contracts.run import RunEvent, RunResult, RunState
from contracts.status import RunStatus


def describe_event(event: RunEvent) -> str:
    data = event.data
    match event.type:
        case "ModelTurnCompleted":
            calls = data.get("tool_calls") or []
            what = f"asks for {', '.join(calls)}" if calls else "answers"
            return f"step {data.get('step')}: model {what} ({data.get('input_tokens')} in / {data.get('output_tokens')} out tokens)"
        case "ToolCalled":
            return f"  tool {data.get('tool')} called"
        case "ToolReturned":
            stored = ", stored by reference" if data.get("stored") else ""
            return f"  tool {data.get('tool')} returned {data.get('output_bytes')} bytes{stored}"
        case "ToolDenied":
            return f"  tool {data.get('tool')} denied by policy"
        case _ if "status_to" in data:
            extra = f" ({data['reason']}: {data.get('message')})" if data.get("reason") else ""
            return f"{event.type}: {data.get('status_from')} -> {data.get('status_to')}{extra}"
        case _:
            return event.type


async def follow(
    handle: WorkflowHandle[Any, RunResult], console: Console, poll_s: float = 0.25
) -> RunResult | None:
    """Print new events until the run closes; return its result (None when it failed or was cancelled)."""
    seen = 0
    result_task = asyncio.ensure_future(handle.result())
    while True:
        try:
            state = await handle.query("get_state", result_type=RunState)
        except RPCError:
            state = None  # no worker has picked the run up yet
        if state is not None:
            for event in state.last_events:
                if event.seq > seen:
                    console.print(describe_event(event), highlight=False)
                    seen = event.seq
        if result_task.done():
            break
        await asyncio.sleep(poll_s)
    try:
        return result_task.result()
    except WorkflowFailureError:
        return None


async def final_state(handle: WorkflowHandle[Any, RunResult]) -> RunState | None:
    try:
        state: RunState = await handle.query("get_state", result_type=RunState)
    except RPCError:
        return None
    return state


def status_style(status: RunStatus) -> str:
    return {
        RunStatus.COMPLETED: "green",
        RunStatus.FAILED: "red",
        RunStatus.CANCELLED: "yellow",
        RunStatus.TIMED_OUT: "red",
    }.get(status, "cyan")
