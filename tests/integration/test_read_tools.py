"""Read tools run as local activities unless pinned to ordinary ones; both replay."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from adapters.ledger import EffectLedger
from contracts.model_turn import MODEL_TURN_ACTIVITY
from contracts.run import ToolExecution, ToolPolicy
from contracts.status import RunStatus
from contracts.tool_call import LOCAL_READS_PATCH, TOOL_CALL_ACTIVITY
from tests.helpers import replayer, running_worker, spec, start, write_script


def _scheduled(history: WorkflowHistory) -> list[str]:
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


def _markers(history: WorkflowHistory) -> list[dict[str, Any]]:
    """Each marker's name and its decoded details (local-activity markers name the activity)."""
    found = []
    for e in history.events:
        if e.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
            continue
        attrs = e.marker_recorded_event_attributes
        details = {k: [p.data for p in v.payloads] for k, v in attrs.details.items()}
        found.append({"name": attrs.marker_name, "details": details})
    return found


def _local_activity_types(history: WorkflowHistory) -> list[str]:
    types = []
    for marker in _markers(history):
        if marker["name"] != "core_local_activity":
            continue
        (data,) = marker["details"]["data"]
        types.append(json.loads(data)["activity_type"])
    return types


def _timers(history: WorkflowHistory) -> int:
    return sum(1 for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED)


async def _replays(history: WorkflowHistory) -> None:
    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


async def test_read_tools_run_as_local_activities_and_the_run_replays(
    client: Client, task_queue: str, migrated_database: str
) -> None:
    run = spec("scripted:source-reader-demo")
    async with running_worker(client, task_queue, migrated_database):
        handle = await start(client, run, task_queue)
        result = await handle.result()
        history = await handle.fetch_history()
    assert result.status is RunStatus.COMPLETED
    assert "class RetryPolicy" in (result.final_output or "")
    assert _scheduled(history) == [MODEL_TURN_ACTIVITY] * 3
    assert _local_activity_types(history) == [TOOL_CALL_ACTIVITY] * 2
    patch_markers = [m for m in _markers(history) if m["name"] == "core_patch"]
    assert len(patch_markers) == 1
    assert LOCAL_READS_PATCH.encode() in b"".join(
        data for values in patch_markers[0]["details"].values() for data in values
    ), patch_markers
    await _replays(history)
    record_to = os.environ.get("GROUNDWORK_RECORD_HISTORIES")
    if record_to:  # re-record the committed history tests/integration/test_replay.py replays
        (Path(record_to) / f"{handle.id}.json").write_text(history.to_json())


async def test_a_read_tool_pinned_as_an_activity_runs_as_an_ordinary_one(
    client: Client, task_queue: str, migrated_database: str
) -> None:
    run = spec(
        "scripted:source-reader-demo",
        policy={
            "search_source": ToolPolicy(execution=ToolExecution.ACTIVITY),
            "read_definition": ToolPolicy(),
            "read_lines": ToolPolicy(),
        },
    )
    async with running_worker(client, task_queue, migrated_database):
        handle = await start(client, run, task_queue)
        result = await handle.result()
        history = await handle.fetch_history()
    assert result.status is RunStatus.COMPLETED
    assert (
        _scheduled(history) == [MODEL_TURN_ACTIVITY, TOOL_CALL_ACTIVITY] + [MODEL_TURN_ACTIVITY] * 2
    )
    assert _local_activity_types(history) == [TOOL_CALL_ACTIVITY]  # read_definition
    await _replays(history)


def test_as_activity_is_pinned_into_the_policy_snapshot_and_refused_for_governed_tools() -> None:
    from agents import function_tool

    from definitions import catalog
    from definitions.governed import as_activity, execution_of
    from definitions.notes_writer import build_agent as notes_writer

    @function_tool
    def crawl(url: str) -> str:
        """Crawl a site."""
        return url

    assert execution_of(crawl) is ToolExecution.LOCAL
    assert as_activity(crawl) is crawl
    assert execution_of(crawl) is ToolExecution.ACTIVITY
    snapshot = catalog.policy_snapshot("source-reader")
    assert {p.execution for p in snapshot.values()} == {ToolExecution.LOCAL}
    governed = next(t for t in notes_writer().tools if t.name == "publish_note")
    with pytest.raises(TypeError, match="governed tools always run as activities"):
        as_activity(governed)  # type: ignore[arg-type]


_LOOKUP_CALLS: dict[str, list[float]] = {}
"""token -> monotonic time of each call of `lookup` (the worker runs in this process)."""


def _lookup_reader(failures: int, answer_after_s: float = 0.0) -> Callable[[], Any]:
    """An agent builder whose one read tool, `lookup`, fails its first `failures` calls for
    a token at once and answers the next one after `answer_after_s`."""

    def build() -> Any:
        from agents import Agent, function_tool

        # failure_error_function=None: the exception fails the tool call instead of becoming
        # error text for the model, so Temporal's retry policy decides what happens next.
        @function_tool(failure_error_function=None)
        async def lookup(token: str) -> str:
            """Look a token up."""
            calls = _LOOKUP_CALLS.setdefault(token, [])
            calls.append(time.monotonic())
            if len(calls) <= failures:
                raise ConnectionError(f"lookup service unavailable (call {len(calls)})")
            await asyncio.sleep(answer_after_s)
            return f"found {token} on call {len(calls)}"

        return Agent(name="lookup-reader", instructions="Look the token up.", tools=[lookup])

    return build


def _lookup_script(tmp_path: Path, token: str) -> Path:
    """One model turn calling `lookup`, then one answering with what it returned."""
    return write_script(
        tmp_path,
        [
            {"tool_calls": [{"name": "lookup", "arguments": {"token": token}}]},
            {"text": "{{last_tool_output}}"},
        ],
    )


@pytest.mark.parametrize("execution", [ToolExecution.LOCAL, ToolExecution.ACTIVITY])
async def test_a_failing_read_is_retried_with_backoff_and_never_touches_the_ledger(
    client: Client,
    task_queue: str,
    migrated_database: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ledger: EffectLedger,
    execution: ToolExecution,
) -> None:
    from definitions import catalog

    monkeypatch.setitem(catalog._loaded, "flaky-reader", _lookup_reader(failures=2))
    token = f"tok-{task_queue[-8:]}-{execution.value}"
    run = spec(
        f"scripted:{_lookup_script(tmp_path, token)}",
        agent="flaky-reader",
        policy={"lookup": ToolPolicy(execution=execution)},
    )
    async with running_worker(client, task_queue, migrated_database):
        handle = await start(client, run, task_queue)
        result = await handle.result()
        history = await handle.fetch_history()
    assert result.status is RunStatus.COMPLETED
    assert result.final_output == f"found {token} on call 3"
    calls = _LOOKUP_CALLS[token]
    assert len(calls) == 3
    # TOOL_RETRY: 1 s, then doubling. Lower bounds only: the backoff exists and grows.
    assert calls[1] - calls[0] >= 0.9, calls
    assert calls[2] - calls[1] >= 1.8, calls
    if execution is ToolExecution.LOCAL:
        # Each failed attempt leaves its marker, and each backoff is a workflow timer
        # (LOCAL_RETRY_THRESHOLD); the worker never backs off on its own.
        assert _local_activity_types(history) == [TOOL_CALL_ACTIVITY] * 3
        assert _timers(history) == 2
        assert TOOL_CALL_ACTIVITY not in _scheduled(history)
    else:
        assert _scheduled(history) == [MODEL_TURN_ACTIVITY, TOOL_CALL_ACTIVITY, MODEL_TURN_ACTIVITY]
        started = [
            e.activity_task_started_event_attributes.attempt
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        ]
        assert started == [1, 3, 1]  # the tool call's third attempt is the one recorded
    assert await ledger.list_effects(run_id=run.run_id) == []
    assert await ledger.events(run.run_id) == []
    await _replays(history)


async def test_a_retried_local_read_gets_its_own_start_to_close_budget(
    client: Client,
    task_queue: str,
    migrated_database: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attempt 2 starts ~1 s after attempt 1 and needs 2.5 s of its 3 s budget. Backing off
    inside the worker, temporalio 1.35 kept attempt 1's 3 s timer running and timed attempt 2
    out at ~3 s, so a third call answered (sdk-rust issue 1454); the backoff on a workflow
    timer (LOCAL_RETRY_THRESHOLD) gives each attempt a budget of its own."""
    from contracts.run import ActivityTimeouts
    from definitions import catalog

    reader = _lookup_reader(failures=1, answer_after_s=2.5)
    monkeypatch.setitem(catalog._loaded, "slow-retry-reader", reader)
    token = f"tok-{task_queue[-8:]}-slow"
    run = spec(
        f"scripted:{_lookup_script(tmp_path, token)}",
        agent="slow-retry-reader",
        timeouts=ActivityTimeouts(tool_call_s=3.0),
    )
    async with running_worker(client, task_queue, migrated_database):
        handle = await start(client, run, task_queue)
        result = await handle.result()
        history = await handle.fetch_history()
    assert result.status is RunStatus.COMPLETED
    assert result.final_output == f"found {token} on call 2"
    assert len(_LOOKUP_CALLS[token]) == 2
    assert _timers(history) == 1  # the one backoff, as a workflow timer
    assert _local_activity_types(history) == [TOOL_CALL_ACTIVITY] * 2
    await _replays(history)
