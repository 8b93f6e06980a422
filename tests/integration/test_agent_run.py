"""A Run end to end on the real dev server and real Postgres, with the scripted model."""

from __future__ import annotations

from temporalio.client import Client

from contracts.run import RunState
from contracts.status import RunStatus
from tests.helpers import running_worker, spec, start


async def test_demo_run_completes_with_expected_tool_calls(
    client: Client, task_queue: str, migrated_database: str
) -> None:
    run = spec("scripted:source-reader-demo")
    async with running_worker(client, task_queue, migrated_database):
        handle = await start(client, run, task_queue)
        result = await handle.result()
        state = await handle.query("get_state", result_type=RunState)
    assert result.status is RunStatus.COMPLETED
    assert result.final_output is not None
    assert "common.py:" in result.final_output
    assert "class RetryPolicy" in result.final_output
    assert result.usage.steps == 3
    assert result.usage.tool_calls == 2
    called = [e.data["tool"] for e in state.last_events if e.type == "ToolCalled"]
    assert called == ["search_source", "read_definition"]
    assert state.status is RunStatus.COMPLETED
