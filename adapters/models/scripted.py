"""A deterministic, offline `agents.Model` driven by a JSON script.

The turn to play is decided from the input alone (the turn numbers embedded in earlier
call ids and message ids), so a retried activity gets the same answer and a replay
never diverges. Every call can be appended to a call log, which is how tests count
model turns at the model itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import Model, ModelResponse, ModelSettings, ModelTracing, Usage
from agents.items import TResponseInputItem, TResponseStreamEvent
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from pydantic import BaseModel, ConfigDict, Field

from contracts.hashing import canonical_json, content_hash

_TURN_ID = re.compile(r"scripted-t(\d+)")
_PLACEHOLDER = re.compile(r"\{\{(last_tool_output|tool_output:(\d+))\}\}")
_INPUT_FIELD = re.compile(r"\{\{input:([A-Za-z0-9_\-]+)\}\}")
_INPUT_LINES = re.compile(r"\{\{input_lines:([^}]*)\}\}")
_MAX_PLACEHOLDER_LINES = 40


class ScriptedToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ScriptedTurn(BaseModel):
    """One model answer: tool calls, or a final text.

    Text may hold `{{tool_output:N}}` / `{{last_tool_output}}`; text and string arguments
    may hold `{{input:KEY}}` (the value of a `KEY: value` line of the task) and text
    `{{input_lines:PREFIX}}` (the task's lines starting with PREFIX). So one script serves
    every branch of a fan-out, each with its own task.
    """

    model_config = ConfigDict(extra="forbid")

    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    text: str | None = None
    delay_s: float = 0.0
    """Sleep before answering: lets chaos tests kill a worker in the middle of a turn."""
    input_tokens: int | None = None
    output_tokens: int | None = None


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turns: list[ScriptedTurn] = Field(min_length=1)
    repeat_last: bool = False
    """Past the last turn, play it again (long runs, budget tests, benchmarks)."""


def load_script(path: Path) -> Script:
    return Script.model_validate_json(path.read_text())


def _played_turns(items: list[Any]) -> int:
    highest = -1
    for item in items:
        if not isinstance(item, dict):
            continue
        for key in ("call_id", "id"):
            value = item.get(key)
            if isinstance(value, str):
                match = _TURN_ID.search(value)
                if match:
                    highest = max(highest, int(match.group(1)))
    return highest + 1


def _tool_outputs(items: list[Any]) -> list[str]:
    return [
        str(item.get("output", ""))
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]


def _clip(text: str) -> str:
    lines = text.splitlines()
    clipped = "\n".join(lines[:_MAX_PLACEHOLDER_LINES])
    return clipped + ("\n…" if len(lines) > _MAX_PLACEHOLDER_LINES else "")


class ScriptedModel(Model):
    """Plays a Script; see the module docstring for why the turn comes from the input."""

    def __init__(self, script: Script, *, name: str, call_log: Path | None = None) -> None:
        self._script = script
        self._name = name
        self._call_log = call_log

    def _turn(self, index: int) -> ScriptedTurn:
        if index < len(self._script.turns):
            return self._script.turns[index]
        if self._script.repeat_last:
            return self._script.turns[-1]
        raise ScriptExhaustedError(
            f"script {self._name} has {len(self._script.turns)} turns; turn {index + 1} was asked for"
        )

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        items: list[Any] = (
            [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        )
        index = _played_turns(items)
        turn = self._turn(index)
        self._log_call(index, items)
        if turn.delay_s:
            await asyncio.sleep(turn.delay_s)
        output: list[Any] = []
        for n, call in enumerate(turn.tool_calls):
            output.append(
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc-scripted-t{index}-{n}",
                    call_id=f"call-scripted-t{index}-{n}",
                    name=call.name,
                    arguments=json.dumps(
                        _fill_arguments(call.arguments, _task_text(items)), sort_keys=True
                    ),
                    status="completed",
                )
            )
        if turn.text is not None or not turn.tool_calls:
            output.append(
                ResponseOutputMessage(
                    type="message",
                    id=f"msg-scripted-t{index}",
                    role="assistant",
                    status="completed",
                    content=[
                        ResponseOutputText(
                            type="output_text",
                            text=self._render(turn.text or "", items),
                            annotations=[],
                        )
                    ],
                )
            )
        input_tokens = turn.input_tokens
        if input_tokens is None:
            input_tokens = len(canonical_json(items)) // 4 + len(system_instructions or "") // 4
        output_tokens = turn.output_tokens
        if output_tokens is None:
            output_tokens = sum(len(o.model_dump_json()) for o in output) // 4
        return ModelResponse(
            output=output,
            usage=Usage(
                requests=1,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                total_tokens=input_tokens + output_tokens,
            ),
            response_id=None,
        )

    def _render(self, text: str, items: list[Any]) -> str:
        outputs = _tool_outputs(items)

        def replace(match: re.Match[str]) -> str:
            if match.group(1) == "last_tool_output":
                return _clip(outputs[-1]) if outputs else ""
            n = int(match.group(2))
            return _clip(outputs[n]) if n < len(outputs) else ""

        task = _task_text(items)
        text = _INPUT_LINES.sub(
            lambda m: "\n".join(line for line in task.splitlines() if line.startswith(m.group(1))),
            text,
        )
        return _fill_fields(_PLACEHOLDER.sub(replace, text), task)

    def _log_call(self, index: int, items: list[Any]) -> None:
        if self._call_log is None:
            return
        line = json.dumps({"script": self._name, "turn": index, "input_hash": content_hash(items)})
        # O_APPEND keeps concurrent workers' lines whole.
        fd = os.open(self._call_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError(
            "the scripted model does not stream; Groundwork runs use get_response"
        )


def _task_text(items: list[Any]) -> str:
    """The run's task: the first user message's text."""
    for item in items:
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "\n".join(
                    str(part.get("text", "")) for part in content if isinstance(part, dict)
                )
    return ""


def _fill_fields(text: str, task: str) -> str:
    fields: dict[str, str] = {}
    for line in task.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return _INPUT_FIELD.sub(lambda m: fields.get(m.group(1), ""), text)


def _fill_arguments(value: Any, task: str) -> Any:
    if isinstance(value, str):
        return _fill_fields(value, task)
    if isinstance(value, dict):
        return {k: _fill_arguments(v, task) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill_arguments(v, task) for v in value]
    return value


class ScriptExhaustedError(RuntimeError):
    """The run asked for more turns than the script has."""
