"""A long run continues as new between turns: its history stays bounded per execution, no
turn is repeated or lost, the model sees the whole transcript, governed effects happen once,
and every execution's history replays."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from adapters.ledger import EffectLedger
from adapters.transcripts import TranscriptStore
from contracts.approvals import DecisionResult
from contracts.continuation import RESUMED_MARKER
from contracts.effects import EffectStatus
from contracts.model_turn import MODEL_TURN_ACTIVITY
from contracts.run import Budgets, RunResult, RunState, workflow_id_for
from contracts.search_attributes import GW_STATUS
from contracts.session import STEER_SIGNAL, SteerInput
from contracts.status import RunStatus
from definitions import catalog
from definitions.notes_writer import note_effect_key
from tests.helpers import (
    replayer,
    running_worker,
    spec,
    start,
    state_until,
    target_commits,
    write_script,
)
from tests.integration.test_approvals import APPROVERS
from tests.integration.test_approvals import _pending as approval_pending
from tests.integration.test_approvals import decision as approval_decision
from workers.settings import Settings
from workers.worker import worker_deps

BOUND = 40
"""History events per execution before the run continues; a tool turn adds about ten."""


async def _executions(client: Client, handle: WorkflowHandle[Any, RunResult]) -> list[Any]:
    """Every execution of the run, oldest first, each with its history."""
    histories = []
    run_id: str | None = handle.first_execution_run_id or handle.result_run_id
    while run_id:
        history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        histories.append(history)
        last = history.events[-1]
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
            else None
        )
    return histories


async def test_a_long_run_continues_as_new_without_losing_or_repeating_a_turn(
    client: Client,
    task_queue: str,
    migrated_database: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(catalog, "_loaded", {})
    catalog.load({"forced-filler": "tests.user_agents:build_forced_filler"})
    tools = 24
    turns = [
        {"tool_calls": [{"name": "produce", "arguments": {"size": 32, "seed": n}}]}
        for n in range(tools)
    ] + [{"text": "first {{tool_output:0}} last {{last_tool_output}}"}]
    script = write_script(tmp_path, turns)
    call_log = tmp_path / "model-calls.jsonl"
    run = spec(
        f"scripted:{script}",
        agent="forced-filler",
        budgets=Budgets(max_steps=tools + 1, max_tool_calls=tools),
        continue_as_new_after_events=BOUND,
    )
    async with running_worker(client, task_queue, migrated_database, scripted_call_log=call_log):
        handle = await start(client, run, task_queue)
        result = await handle.result()
        state = await handle.query("get_state", result_type=RunState)
        histories = await _executions(client, handle)
        for history in histories:  # each execution replays on the worker's code
            await replayer().replay_workflow(history)

    assert result.status is RunStatus.COMPLETED, result
    assert result.usage.steps == tools + 1, result.usage
    assert result.usage.tool_calls == tools, result.usage
    # The model saw the first and the last tool output: the transcript crossed every execution.
    outputs = await _stored_outputs(migrated_database, result.transcript_ref)
    assert outputs == [(f"filler-{n}-" * 4)[:32] for n in range(tools)]
    assert result.final_output == f"first {outputs[0]} last {outputs[-1]}"
    # Each turn was asked of the model exactly once, in order.
    asked = [json.loads(line)["turn"] for line in call_log.read_text().splitlines()]
    assert asked == list(range(tools + 1)), asked

    assert len(histories) >= 3, len(histories)
    # tool_choice is forced until the agent has used a tool, in the first execution only.
    choices = [
        [turn["model_settings"].get("tool_choice") for turn in _model_turn_inputs(history)]
        for history in histories
    ]
    assert choices[0][0] == "required", choices
    later = [choice for execution in choices[1:] for choice in execution]
    assert later, choices
    assert all(c is None for c in choices[0][1:] + later), choices
    for history in histories[:-1]:
        # The bound is checked between turns, so an execution ends within one turn past it.
        assert BOUND <= len(history.events) <= BOUND + 15, len(history.events)
    assert state.step == tools + 1
    assert state.status is RunStatus.COMPLETED
    continued = [e for e in state.last_events if e.type == "RunContinued"]
    assert continued
    assert continued[-1].data["execution"] == len(histories)
    assert [e.seq for e in state.last_events] == sorted(e.seq for e in state.last_events)

    described = await client.get_workflow_handle(workflow_id_for(run.run_id)).describe()
    assert described.status is WorkflowExecutionStatus.COMPLETED
    assert described.typed_search_attributes.get(GW_STATUS) == RunStatus.COMPLETED.value


def _model_turn_inputs(history: Any) -> list[dict[str, Any]]:
    """The model-turn activity inputs that carry the agent's context (the others name it)."""
    inputs = []
    for event in history.events:
        attrs = event.activity_task_scheduled_event_attributes
        if event.HasField("activity_task_scheduled_event_attributes") and (
            attrs.activity_type.name == MODEL_TURN_ACTIVITY
        ):
            turn = json.loads(attrs.input.payloads[0].data)
            if "model_settings" in turn:
                inputs.append(turn)
    return inputs


async def _stored_outputs(database_url: str, ref: str | None) -> list[str]:
    assert ref is not None
    async with worker_deps(Settings(), database_url) as deps:
        store = TranscriptStore(deps.pool)
        items = await store.expand_markers(await store.load(ref))
    assert not any(RESUMED_MARKER in json.dumps(item) for item in items)
    return [i["output"] for i in items if i.get("type") == "function_call_output"]


async def test_governed_writes_across_executions_happen_once_each(
    client: Client,
    task_queue: str,
    migrated_database: str,
    tmp_path: Path,
    target_url: str,
    ledger: EffectLedger,
) -> None:
    notes = [f"can-{task_queue[-8:]}-{n}" for n in range(6)]
    arguments = [{"note_id": note, "revision": 1, "content": f"# {note}\n"} for note in notes]
    script = write_script(
        tmp_path,
        [{"tool_calls": [{"name": "publish_note", "arguments": a}]} for a in arguments]
        + [{"text": "published"}],
    )
    run = spec(f"scripted:{script}", agent="notes-writer", continue_as_new_after_events=20)
    targets = {"notes": {"kind": "http", "base_url": target_url, "timeout_s": 3}}
    async with running_worker(client, task_queue, migrated_database, targets=targets):
        handle = await start(client, run, task_queue)
        result = await handle.result()
        histories = await _executions(client, handle)

    assert result.status is RunStatus.COMPLETED
    assert result.final_output == "published"
    assert len(histories) >= 3, len(histories)
    for args in arguments:
        key = note_effect_key(args)
        assert target_commits(target_url, key) == 1, key
        record = await ledger.get(key)
        assert record is not None, key
        assert record.status is EffectStatus.SUCCEEDED, record
    events = [e for e in await ledger.events(run.run_id) if e["type"] == "NotePublished"]
    assert len(events) == len(notes)


async def test_steers_cross_executions_once_each(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path
) -> None:
    """A steer received before a continuation is injected after it; one re-sent to the next
    execution is recognised as seen and not injected again."""
    turns = [
        {
            "tool_calls": [{"name": "produce", "arguments": {"size": 16, "seed": n}}],
            "delay_s": 0.25,
        }
        for n in range(16)
    ] + [{"text": "done"}]
    script = write_script(tmp_path, turns)
    run = spec(
        f"scripted:{script}",
        agent="filler",
        budgets=Budgets(max_steps=20),
        continue_as_new_after_events=BOUND,
    )
    first = SteerInput(input_id="in-1", text="steer one")
    second = SteerInput(input_id="in-2", text="steer two")
    async with running_worker(client, task_queue, migrated_database):
        handle = await start(client, run, task_queue)
        await state_until(handle, lambda s: s.step >= 2)
        await handle.signal(STEER_SIGNAL, first)
        await state_until(handle, lambda s: any(e.type == "RunContinued" for e in s.last_events))
        await handle.signal(STEER_SIGNAL, first)  # the same input again, to the next execution
        await handle.signal(STEER_SIGNAL, second)
        result = await handle.result()
        state = await handle.query("get_state", result_type=RunState)

    assert result.status is RunStatus.COMPLETED
    assert state.steered == ["in-1", "in-2"]
    assert result.transcript_ref is not None
    async with worker_deps(Settings(), migrated_database) as deps:
        items = await TranscriptStore(deps.pool).load(result.transcript_ref)
    said = [i.get("content") for i in items if i.get("role") == "user"]
    assert said.count("steer one") == 1, said
    assert said.count("steer two") == 1, said
    assert said.index("steer one") < said.index("steer two")


async def test_a_decision_repeated_to_the_next_execution_is_the_same_decision(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path, target_url: str
) -> None:
    """An approver retrying its approve after the run continued gets "already decided", as
    it would have before, not "no pending approval"."""
    reviewed = {"note_id": f"rev-{task_queue[-8:]}", "revision": 3, "content": "# reviewed\n"}
    notes = [
        {"note_id": f"after-{task_queue[-8:]}-{n}", "revision": 1, "content": f"# {n}\n"}
        for n in range(3)
    ]
    script = write_script(
        tmp_path,
        [{"tool_calls": [{"name": "publish_reviewed_note", "arguments": reviewed}]}]
        + [{"tool_calls": [{"name": "publish_note", "arguments": a}]} for a in notes]
        + [{"text": "done", "delay_s": 3.0}],
    )
    run = spec(f"scripted:{script}", agent="notes-writer", continue_as_new_after_events=20)
    targets = {"notes": {"kind": "http", "base_url": target_url, "timeout_s": 3}}
    async with running_worker(
        client, task_queue, migrated_database, targets=targets, approvers=APPROVERS
    ):
        handle = await start(client, run, task_queue)
        approve = approval_decision(await approval_pending(handle))
        first = await handle.execute_update("decide_approval", approve, result_type=DecisionResult)
        assert first.accepted, first
        await state_until(handle, lambda s: any(e.type == "RunContinued" for e in s.last_events))
        again = await handle.execute_update("decide_approval", approve, result_type=DecisionResult)
        result = await handle.result()

    assert again.accepted, again
    assert again.message == "already decided the same way"
    assert result.status is RunStatus.COMPLETED
    assert target_commits(target_url, note_effect_key(reviewed)) == 1


async def test_a_run_recorded_before_continuing_existed_replays_as_recorded(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path
) -> None:
    """A long run whose history has no continue-as-new patch marker (recorded by a worker
    from before) must replay as it ran, not continue as new in the middle of a replay."""
    turns = [
        {"tool_calls": [{"name": "produce", "arguments": {"size": 16, "seed": n}}]}
        for n in range(8)
    ] + [{"text": "done"}]
    run = spec(f"scripted:{write_script(tmp_path, turns)}", agent="filler")
    async with running_worker(client, task_queue, migrated_database):
        handle = await start(client, run, task_queue)
        assert (await handle.result()).status is RunStatus.COMPLETED
        history = await handle.fetch_history()
    assert len(history.events) > BOUND  # long enough to have continued under the lower bound
    started = history.events[0].workflow_execution_started_event_attributes
    recorded = json.loads(started.input.payloads[0].data)
    assert recorded["continue_as_new_after_events"] == 10_000
    # As if the run had been started with a bound it passed, by code that never continued.
    recorded["continue_as_new_after_events"] = 20
    started.input.payloads[0].data = json.dumps(recorded).encode()
    await replayer().replay_workflow(history)
