"""The model stub's per-turn hash memo gives exactly the hashes it would compute afresh."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from contracts.hashing import content_hash
from workflows._model_stub import TurnHooks, WorkflowModel


def _model() -> WorkflowModel:
    return WorkflowModel(
        run_id="r",
        route="scripted:x",
        agent_name=lambda: "a",
        hooks=TurnHooks(before=lambda: 1, after=lambda _: None),
        task_queue=None,
        timeout=timedelta(seconds=1),
        heartbeat=timedelta(seconds=1),
    )


def _msg(n: int) -> dict[str, Any]:
    return {"role": "user", "content": f"m{n}", "type": "message"}


def test_item_hashes_match_fresh_hashes_as_the_transcript_grows_and_changes() -> None:
    model = _model()
    turns = [
        [_msg(0)],
        [_msg(0), _msg(1), _msg(2)],
        # a steer injected in the middle shifts the later items by one
        [_msg(0), _msg(9), _msg(1), _msg(2), _msg(3)],
        # an item changed in place at the same index
        [_msg(0), {**_msg(9), "content": "edited"}, _msg(1)],
        [],
    ]
    for items in turns:
        assert model._item_hashes(items) == [content_hash(i) for i in items]


def test_context_digest_is_recomputed_when_the_context_changes() -> None:
    model = _model()
    a = {"tools": [{"name": "t"}], "model_settings": {}}
    b = {"tools": [{"name": "u"}], "model_settings": {}}
    assert model._context_digest(a) == content_hash(a)
    assert model._context_digest(dict(a)) == content_hash(a)
    assert model._context_digest(b) == content_hash(b)
