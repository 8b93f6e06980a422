"""The scripted model decides from its input alone, so retries and replays see the same answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agents import ModelSettings, ModelTracing

from adapters.models.scripted import Script, ScriptedModel, ScriptExhaustedError


def _model(turns: list[dict[str, Any]], tmp_path: Path, repeat_last: bool = False) -> ScriptedModel:
    script = Script.model_validate({"turns": turns, "repeat_last": repeat_last})
    return ScriptedModel(script, name="t", call_log=tmp_path / "calls.jsonl")


async def _ask(model: ScriptedModel, items: list[dict[str, Any]]) -> Any:
    return await model.get_response(
        None, items, ModelSettings(), [], None, [], ModelTracing.DISABLED,
        previous_response_id=None, conversation_id=None, prompt=None,
    )  # fmt: skip


async def test_turn_is_chosen_from_the_input(tmp_path: Path) -> None:
    model = _model(
        [
            {"tool_calls": [{"name": "a", "arguments": {"x": 1}}]},
            {"text": "got {{last_tool_output}}"},
        ],
        tmp_path,
    )
    first = await _ask(model, [{"role": "user", "content": "q"}])
    again = await _ask(model, [{"role": "user", "content": "q"}])
    assert first.output[0].model_dump() == again.output[0].model_dump()
    call = first.output[0]
    items = [
        {"role": "user", "content": "q"},
        call.model_dump(exclude_unset=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "42"},
    ]
    second = await _ask(model, items)
    assert second.output[0].content[0].text == "got 42"
    turns = [json.loads(x)["turn"] for x in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert turns == [0, 0, 1]


async def test_exhausted_script_raises_unless_repeating(tmp_path: Path) -> None:
    model = _model([{"text": "done"}], tmp_path)
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "q"},
        {"type": "message", "id": "msg-scripted-t0", "role": "assistant", "content": []},
    ]
    with pytest.raises(ScriptExhaustedError):
        await _ask(model, items)
    repeating = _model([{"text": "done"}], tmp_path, repeat_last=True)
    assert (await _ask(repeating, items)).output[0].content[0].text == "done"
