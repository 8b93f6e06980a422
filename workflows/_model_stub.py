"""An `agents.Model` that lives in the workflow and runs each model turn as an activity.

It sends the transcript as a reference to what is already stored plus the items that are
new since then, so a turn's history cost does not grow with the transcript.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from agents import (
        AgentOutputSchema,
        AgentOutputSchemaBase,
        FunctionTool,
        Handoff,
        Model,
        ModelProvider,
        ModelResponse,
        ModelSettings,
        ModelTracing,
        Tool,
        Usage,
    )
    from agents.items import TResponseInputItem, TResponseStreamEvent
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseReasoningItem,
    )
    from pydantic import TypeAdapter
    from pydantic_core import to_jsonable_python

from contracts.continuation import resumed_marker
from contracts.hashing import content_hash
from contracts.model_turn import (
    MODEL_TURN_ACTIVITY,
    FunctionToolSpec,
    HandoffSpec,
    ModelTurnInput,
    ModelTurnResult,
    OutputSchemaSpec,
    elided,
    turn_context,
)

_OUTPUT_TYPES: dict[str, type[BaseModel]] = {
    "function_call": ResponseFunctionToolCall,
    "message": ResponseOutputMessage,
    "reasoning": ResponseReasoningItem,
}

MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=8,
)


def plain_item(item: Any) -> dict[str, Any]:
    """A transcript item as plain JSON; unset pydantic fields stay out so hashes are stable."""
    if isinstance(item, BaseModel):
        return item.model_dump(mode="json", exclude_unset=True)
    value = to_jsonable_python(item)
    if not isinstance(value, dict):
        raise TypeError(f"transcript item is not an object: {type(item).__name__}")
    return value


def _set_settings(settings: ModelSettings) -> dict[str, Any]:
    """The settings that are set: the activity rebuilds ModelSettings from them, where an
    absent field is None again. The null fields were ~0.3 KB of a run's first turn in
    history (a 4-turn notes-writer run: 18,246 -> 17,925 bytes)."""
    return {key: value for key, value in settings.to_json_dict().items() if value is not None}


def _output_item(data: dict[str, Any]) -> Any:
    model = _OUTPUT_TYPES.get(str(data.get("type")))
    if model is not None:
        return model.model_validate(data)
    from openai.types.responses import ResponseOutputItem

    return TypeAdapter(ResponseOutputItem).validate_python(data)


def _output_schema(schema: AgentOutputSchemaBase | None) -> OutputSchemaSpec | None:
    if schema is None:
        return None
    wrapped = (
        bool(getattr(schema, "_is_wrapped", False))
        if isinstance(schema, AgentOutputSchema)
        else False
    )
    return OutputSchemaSpec(
        output_type_name=schema.name(),
        is_wrapped=wrapped,
        json_schema=None if schema.is_plain_text() else schema.json_schema(),
        strict_json_schema=schema.is_strict_json_schema(),
    )


def _tool_specs(tools: list[Tool]) -> list[FunctionToolSpec]:
    specs: list[FunctionToolSpec] = []
    for tool in tools:
        if not isinstance(tool, FunctionTool):
            raise TypeError(
                f"tool {tool.name!r} ({type(tool).__name__}) is not a function tool; "
                "Groundwork runs only function tools, so every call passes the tool gateway"
            )
        specs.append(
            FunctionToolSpec(
                name=tool.name,
                description=tool.description,
                params_json_schema=tool.params_json_schema,
                strict_json_schema=tool.strict_json_schema,
            )
        )
    return specs


class ContinueAsNewNeededError(Exception):
    """Raised by the stub instead of a turn when the run must continue as new first: the
    loop stops at a turn boundary, with what the next execution needs to pick it up."""

    def __init__(self, transcript_ref: str, pending_items: list[dict[str, Any]]) -> None:
        super().__init__("the run continues as new before its next model turn")
        self.transcript_ref = transcript_ref
        self.pending_items = pending_items


class TurnHooks:
    """What the workflow does around each turn: budget checks before, accounting after,
    (optionally) user messages to inject before the turn (steering), and (optionally)
    whether to continue as new instead of taking the turn."""

    def __init__(
        self,
        before: Callable[[], int],
        after: Callable[[ModelTurnResult], None],
        inject: Callable[[int], Awaitable[list[dict[str, Any]]]] | None = None,
        continue_as_new: Callable[[], bool] | None = None,
    ) -> None:
        self.before = before
        self.after = after
        self.inject = inject
        self.continue_as_new = continue_as_new


def with_injected(
    items: list[dict[str, Any]], injected: list[tuple[int, dict[str, Any]]]
) -> list[dict[str, Any]]:
    """The SDK's items with each injected item placed before the SDK item it preceded.

    An injected item is recorded with the number of SDK items there were when it came; the
    SDK's input only grows at the end, so every later turn sees the same prefix (and the
    transcript-by-reference split keeps working). If a handoff's input filter shortens the
    SDK's list, the injected items still come, after what is left.
    """
    merged: list[dict[str, Any]] = []
    pending = iter(injected)
    upcoming = next(pending, None)
    for index, item in enumerate(items):
        while upcoming is not None and upcoming[0] <= index:
            merged.append(upcoming[1])
            upcoming = next(pending, None)
        merged.append(item)
    while upcoming is not None:
        merged.append(upcoming[1])
        upcoming = next(pending, None)
    return merged


class WorkflowModel(Model):
    def __init__(
        self,
        *,
        run_id: str,
        route: str,
        agent_name: Callable[[], str],
        hooks: TurnHooks,
        task_queue: str | None,
        timeout: timedelta,
        heartbeat: timedelta,
        resumed_from: str | None = None,
    ) -> None:
        """`resumed_from`: in a continued execution, the stored transcript the loop's first
        input item (`contracts.continuation.resumed_marker`) stands for."""
        self._run_id = run_id
        self._route = route
        self._agent_name = agent_name
        self._hooks = hooks
        self._task_queue = task_queue
        self._timeout = timeout
        self._heartbeat = heartbeat
        self._stored_ref: str | None = None
        self._stored_hashes: list[str] = []
        self._stored_contexts: set[str] = set()
        # What the previous turn hashed: a run's transcript only grows, so most of each turn's
        # items (and all of its context) equal the last turn's, and a dict comparison is far
        # cheaper than canonical JSON plus sha256 of the same item again (~2 % of worker CPU).
        self._hashed_items: list[dict[str, Any]] = []
        self._hashed_item_digests: list[str] = []
        self._hashed_context: tuple[dict[str, Any], str] | None = None
        self._injected: list[tuple[int, dict[str, Any]]] = []
        self._turns_taken = 0
        if resumed_from is not None:
            # The marker is stored as this ref's whole transcript, so `_split` sends the ref
            # and only the items after the marker.
            self._stored_ref = resumed_from
            self._stored_hashes = [content_hash(resumed_marker(resumed_from))]

    def _item_hashes(self, items: list[dict[str, Any]]) -> list[str]:
        seen, digests = self._hashed_items, self._hashed_item_digests
        hashes = [
            digests[i] if i < len(seen) and item == seen[i] else content_hash(item)
            for i, item in enumerate(items)
        ]
        # Kept without copies: plain_item builds the SDK's items afresh each turn, injected
        # steers are reused but never changed, and nothing changes an item after it is hashed.
        self._hashed_items = items
        self._hashed_item_digests = hashes
        return hashes

    def _context_digest(self, context: dict[str, Any]) -> str:
        if self._hashed_context is not None and self._hashed_context[0] == context:
            return self._hashed_context[1]
        digest = content_hash(context)
        self._hashed_context = (context, digest)
        return digest

    def _split(self, hashes: list[str]) -> tuple[str | None, int]:
        """The stored ref to build on and how many leading items it already holds."""
        known = self._stored_hashes
        if self._stored_ref is not None and hashes[: len(known)] == known:
            return self._stored_ref, len(known)
        return None, 0

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        raw = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        items = [plain_item(item) for item in raw]
        if self._turns_taken and self._hooks.continue_as_new and self._hooks.continue_as_new():
            merged = with_injected(items, self._injected) if self._injected else items
            parent_ref, known = self._split(self._item_hashes(merged))
            # Only from a stored prefix: what is pending then is one turn's worth of items.
            # A handoff input filter can rewrite the list; that turn is taken as it is.
            if parent_ref is not None:
                raise ContinueAsNewNeededError(parent_ref, merged[known:])
        step = self._hooks.before()
        if self._hooks.inject is not None:
            # The hook suspends only when it has something to inject (it acknowledges each
            # steer), so runs never steered issue exactly the commands they always did.
            for extra in await self._hooks.inject(step):
                self._injected.append((len(items), extra))
        if self._injected:
            items = with_injected(items, self._injected)
        hashes = self._item_hashes(items)
        parent_ref, known = self._split(hashes)
        turn = ModelTurnInput(
            run_id=self._run_id,
            step=step,
            model_route=self._route,
            agent_name=self._agent_name(),
            system_instructions=system_instructions,
            parent_ref=parent_ref,
            new_items=items[known:],
            new_item_hashes=hashes[known:],
            model_settings=_set_settings(model_settings),
            tools=_tool_specs(tools),
            handoffs=[
                HandoffSpec(
                    tool_name=h.tool_name,
                    tool_description=h.tool_description,
                    input_json_schema=h.input_json_schema,
                    agent_name=h.agent_name,
                    strict_json_schema=h.strict_json_schema,
                )
                for h in handoffs
            ],
            output_schema=_output_schema(output_schema),
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
        )
        digest = self._context_digest(turn_context(turn))
        sent = (
            elided(turn, digest)
            if digest in self._stored_contexts
            else turn.model_copy(update={"context_digest": digest})
        )
        result: ModelTurnResult = await workflow.execute_activity(
            MODEL_TURN_ACTIVITY,
            sent,
            result_type=ModelTurnResult,
            task_queue=self._task_queue,
            start_to_close_timeout=self._timeout,
            heartbeat_timeout=self._heartbeat,
            retry_policy=MODEL_RETRY,
            summary=f"model turn {step} ({self._route})",
        )
        self._stored_ref, self._stored_hashes = result.transcript_ref, hashes
        self._turns_taken += 1
        if result.context_stored == digest:  # stored before the activity returned
            self._stored_contexts.add(digest)
        self._hooks.after(result)
        return ModelResponse(
            output=[_output_item(item) for item in result.output],
            usage=Usage(
                requests=result.usage.requests,
                input_tokens=result.usage.input_tokens,
                output_tokens=result.usage.output_tokens,
                total_tokens=result.usage.total_tokens,
            ),
            response_id=result.response_id,
        )

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("streaming is not supported inside a durable run; use Runner.run")


class WorkflowModelProvider(ModelProvider):
    """Every model name resolves to the run's one stub: the route comes from the RunSpec."""

    def __init__(self, model: WorkflowModel) -> None:
        self._model = model

    def get_model(self, model_name: str | None) -> Model:
        return self._model
