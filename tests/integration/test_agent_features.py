"""Ordinary openai-agents features work unchanged inside a run: handoffs, structured output,
policy denials, and the refusal of tools that would bypass the tool-call activity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from contracts.run import RunState, ToolPolicy
from contracts.status import RunStatus
from tests.helpers import running_worker, spec, start, write_script

SEARCH = {
    "name": "search_source",
    "arguments": {"package": "temporalio", "pattern": "^class RetryPolicy\\b"},
}


async def test_handoff_then_structured_output(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path
) -> None:
    answer = {"path": "common.py", "line": 37, "summary": "RetryPolicy is a dataclass."}
    script = write_script(
        tmp_path,
        [
            {"tool_calls": [{"name": "transfer_to_reporter", "arguments": {}}]},
            {"tool_calls": [SEARCH]},
            {"text": json.dumps(answer)},
        ],
    )
    run = spec(f"scripted:{script}", agent="triage")
    async with running_worker(client, task_queue, migrated_database):
        handle = await start(client, run, task_queue)
        result = await handle.result()
        state = await handle.query("get_state", result_type=RunState)
    assert result.status is RunStatus.COMPLETED
    assert result.final_output is not None
    assert json.loads(result.final_output) == answer
    tool_events = [e for e in state.last_events if e.type == "ToolReturned"]
    assert [e.data["tool"] for e in tool_events] == ["search_source"]
    assert result.usage.tool_calls == 1


async def test_disallowed_tool_is_denied_as_a_tool_result(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path
) -> None:
    script = write_script(
        tmp_path, [{"tool_calls": [SEARCH]}, {"text": "saw: {{last_tool_output}}"}]
    )
    run = spec(
        f"scripted:{script}",
        policy={"search_source": ToolPolicy(allowed=False)},
    )
    async with running_worker(client, task_queue, migrated_database):
        handle = await start(client, run, task_queue)
        result = await handle.result()
        state = await handle.query("get_state", result_type=RunState)
    assert result.final_output is not None
    assert result.final_output.startswith("saw: denied: tool 'search_source' is not allowed")
    assert result.usage.tool_calls == 0
    assert "ToolDenied" in [e.type for e in state.last_events]


async def test_unknown_agent_fails_the_run_clearly(
    client: Client, task_queue: str, migrated_database: str
) -> None:
    run = spec("scripted:source-reader-demo", agent="no-such-agent")
    async with running_worker(client, task_queue, migrated_database):
        handle = await start(client, run, task_queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "RunFailed.agent_error"
    assert "unknown agent 'no-such-agent'" in str(cause)
