"""The agent's context (instructions, tools, ...) is elided from a model turn only after an
activity confirmed it holds it stored: a worker running older code never gets a turn it
cannot read, and neither does a run whose earlier turns older code recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from activities.model_turn import ModelTurnActivities
from activities.tool_call import ToolCallActivities
from contracts.model_turn import MODEL_TURN_ACTIVITY, ModelTurnInput, ModelTurnResult
from contracts.status import RunStatus
from tests.helpers import spec, start, write_script
from workers.settings import Settings
from workers.worker import prepare_agents_sdk, sandbox_runner, worker_deps
from workflows.agent_run import AgentRunWorkflow

TURNS = [
    {"tool_calls": [{"name": "produce", "arguments": {"size": 10, "seed": 1}}]},
    {"tool_calls": [{"name": "produce", "arguments": {"size": 10, "seed": 2}}]},
    {"text": "done"},
]


async def _run(client: Client, task_queue: str, database_url: str, tmp_path: Path, *,
               confirms: bool) -> list[ModelTurnInput]:  # fmt: skip
    seen: list[ModelTurnInput] = []
    async with worker_deps(Settings(task_queue=task_queue), database_url) as deps:
        real = ModelTurnActivities(deps.router, deps.transcripts)

        @activity.defn(name=MODEL_TURN_ACTIVITY)
        async def model_turn(turn: ModelTurnInput) -> ModelTurnResult:
            seen.append(turn)
            result = await real.model_turn(turn)
            # Older code returned no confirmation (and ignored the digest it did not know).
            return result if confirms else result.model_copy(update={"context_stored": None})

        prepare_agents_sdk()
        async with Worker(
            client, task_queue=task_queue, workflows=[AgentRunWorkflow],
            activities=[model_turn, ToolCallActivities(deps.transcripts).tool_call],
            workflow_runner=sandbox_runner(),
        ):  # fmt: skip
            run = spec(f"scripted:{write_script(tmp_path, TURNS)}", agent="filler")
            result = await (await start(client, run, task_queue)).result()
    assert result.status is RunStatus.COMPLETED
    return seen


async def test_context_is_elided_only_after_an_activity_confirms_it_stored_it(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path
) -> None:
    confirmed = await _run(client, task_queue + "-new", migrated_database, tmp_path, confirms=True)
    assert [t.context_elided for t in confirmed] == [False, True, True]
    unconfirmed = await _run(
        client, task_queue + "-old", migrated_database, tmp_path, confirms=False
    )
    assert [t.context_elided for t in unconfirmed] == [False, False, False]
    assert all(t.tools for t in unconfirmed)
    full: Any = unconfirmed[0].model_dump(include={"system_instructions", "tools"})
    assert confirmed[0].model_dump(include={"system_instructions", "tools"}) == full


async def test_a_context_that_does_not_match_its_digest_is_refused_and_not_stored(
    migrated_database: str,
) -> None:
    import dataclasses

    import pytest
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from adapters.transcripts import TranscriptMissingError

    async with worker_deps(Settings(), migrated_database) as deps:
        turns = ModelTurnActivities(deps.router, deps.transcripts)
        turn = ModelTurnInput(
            run_id="ctx-mismatch", step=1, model_route="scripted:unused", agent_name="filler",
            system_instructions="the real instructions", context_digest="0" * 64,
        )  # fmt: skip
        env = ActivityEnvironment()
        env.info = dataclasses.replace(ActivityEnvironment.default_info(), heartbeat_timeout=None)
        with pytest.raises(ApplicationError) as refused:
            await env.run(turns.model_turn, turn)
        assert refused.value.type == "ContextDigestMismatch"
        assert refused.value.non_retryable
        with pytest.raises(TranscriptMissingError):
            await deps.transcripts.get_context("0" * 64)


async def test_a_parent_gone_from_the_store_fails_the_turn_even_while_the_model_also_fails(
    migrated_database: str,
) -> None:
    """The node's write runs beside the model call: when it finds its parent gone (cached
    by this worker, deleted from Postgres), the turn fails TranscriptMissing, not with the
    model's error, and no node is left behind."""
    import dataclasses

    import psycopg
    import pytest
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    async with worker_deps(Settings(), migrated_database) as deps:
        parent, _ = await deps.transcripts.append("gone-parent", None, [{"type": "message"}])
        async with await psycopg.AsyncConnection.connect(migrated_database) as conn:
            await conn.execute("DELETE FROM transcript_nodes WHERE ref = %s", (parent,))
            await conn.commit()
        turns = ModelTurnActivities(deps.router, deps.transcripts)
        item = {"role": "user", "content": "next", "type": "message"}
        turn = ModelTurnInput(
            run_id="gone-parent", step=2, model_route="scripted:no-such-script",
            agent_name="filler", parent_ref=parent, new_items=[item],
        )  # fmt: skip
        env = ActivityEnvironment()
        env.info = dataclasses.replace(ActivityEnvironment.default_info(), heartbeat_timeout=None)
        with pytest.raises(ApplicationError) as failed:
            await env.run(turns.model_turn, turn)
        assert failed.value.type == "TranscriptMissing"
        assert failed.value.non_retryable
        async with await psycopg.AsyncConnection.connect(migrated_database) as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM transcript_nodes WHERE run_id = 'gone-parent'"
            )
            assert await cur.fetchone() == (0,)
