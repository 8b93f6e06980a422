"""History bytes per turn stay flat whatever the tool output size; the model still sees it all."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.api.history.v1 import History
from temporalio.client import Client

from adapters.transcripts import TranscriptStore
from contracts.run import Budgets
from tests.helpers import running_worker, spec, start, write_script
from workers.settings import Settings
from workers.worker import worker_deps

TURNS = 10


async def _history_bytes(
    client: Client, migrated_database: str, task_queue: str, tmp_path: Path, size: int
) -> tuple[int, int, str]:
    turns = [
        {"tool_calls": [{"name": "produce", "arguments": {"size": size, "seed": n}}]}
        for n in range(TURNS - 1)
    ] + [{"text": "done"}]
    script = write_script(tmp_path, turns)
    run = spec(f"scripted:{script}", agent="filler", budgets=Budgets(max_tokens=10_000_000))
    async with running_worker(client, task_queue, migrated_database):
        handle = await start(client, run, task_queue)
        result = await handle.result()
        history = await handle.fetch_history()
    proto = History(events=[e for e in history.events])
    largest = max(e.ByteSize() for e in history.events)
    assert result.transcript_ref is not None
    return proto.ByteSize(), largest, result.transcript_ref


async def test_history_is_flat_in_tool_output_size(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path
) -> None:
    small, _, _ = await _history_bytes(client, migrated_database, task_queue + "-s", tmp_path, 1024)
    large, large_largest, ref = await _history_bytes(
        client, migrated_database, task_queue + "-l", tmp_path, 100 * 1024
    )
    # 9 tool outputs of 100 KiB would be ~900 KB in history if carried inline, and quadratically
    # more if each model input carried the transcript.
    assert large / small <= 1.2, (small, large)
    assert large_largest < 8 * 1024, large_largest
    async with worker_deps(Settings(), migrated_database) as deps:
        store = TranscriptStore(deps.pool)
        items = await store.expand_markers(await store.load(ref))
    outputs = [i["output"] for i in items if i.get("type") == "function_call_output"]
    assert len(outputs) == TURNS - 1
    assert all(len(o) == 100 * 1024 for o in outputs), [len(o) for o in outputs]
    assert json.dumps(items)  # the stored transcript is plain JSON
