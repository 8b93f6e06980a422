"""The model-turn activity: load the transcript by ref, call the routed model, store nothing twice."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import openai
from agents import (
    AgentOutputSchemaBase,
    FunctionTool,
    Handoff,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    UserError,
)
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities._context import activity_logger
from activities._heartbeat import heartbeating
from adapters.models import ModelRouter, RouteError
from adapters.models.retry_posture import classify_http_status
from adapters.models.scripted import ScriptExhaustedError
from adapters.transcripts import TranscriptMissingError, TranscriptStore
from contracts.hashing import content_hash
from contracts.model_turn import (
    CONTEXT_FIELDS,
    MODEL_TURN_ACTIVITY,
    FunctionToolSpec,
    HandoffSpec,
    ModelTurnInput,
    ModelTurnResult,
    OutputSchemaSpec,
    TurnUsage,
    turn_context,
)


class _OutputSchema(AgentOutputSchemaBase):
    """The output schema as the model needs it; validation happens in the workflow's agent."""

    def __init__(self, spec: OutputSchemaSpec) -> None:
        self._spec = spec

    def is_plain_text(self) -> bool:
        return self._spec.output_type_name in (None, "str")

    def name(self) -> str:
        return self._spec.output_type_name or "str"

    def json_schema(self) -> dict[str, Any]:
        if self._spec.json_schema is None:
            raise UserError("output type is plain text; it has no JSON schema")
        return self._spec.json_schema

    def is_strict_json_schema(self) -> bool:
        return self._spec.strict_json_schema

    def validate_json(self, json_str: str) -> Any:
        raise NotImplementedError("validated in the workflow")


async def _never_invoked(*_: Any) -> Any:
    raise RuntimeError("tools run through the tool-call activity, never inside a model turn")


def _tool(spec: FunctionToolSpec) -> FunctionTool:
    return FunctionTool(
        name=spec.name,
        description=spec.description,
        params_json_schema=spec.params_json_schema,
        on_invoke_tool=_never_invoked,
        strict_json_schema=spec.strict_json_schema,
    )


def _handoff(spec: HandoffSpec) -> Handoff[Any, Any]:
    return Handoff(
        tool_name=spec.tool_name,
        tool_description=spec.tool_description,
        input_json_schema=spec.input_json_schema,
        agent_name=spec.agent_name,
        strict_json_schema=spec.strict_json_schema,
        on_invoke_handoff=_never_invoked,
    )


def _transcript_missing(err: TranscriptMissingError) -> ApplicationError:
    return ApplicationError(str(err), type="TranscriptMissing", non_retryable=True)


class ModelTurnActivities:
    """Holds the worker's model router and transcript store."""

    def __init__(self, router: ModelRouter, transcripts: TranscriptStore) -> None:
        self._router = router
        self._transcripts = transcripts

    async def _with_context(self, turn: ModelTurnInput) -> ModelTurnInput:
        """The turn with its agent context in place: stored on first sight, read back after."""
        if turn.context_digest is None:  # started before turns carried a digest
            return turn
        if turn.context_elided:
            body = await self._transcripts.get_context(turn.context_digest)
            stored = json.loads(body)
            return ModelTurnInput.model_validate(
                {**turn.model_dump(exclude=set(CONTEXT_FIELDS)), **stored, "context_elided": False}
            )
        context = turn_context(turn)
        if content_hash(context) != turn.context_digest:
            raise ApplicationError(
                f"turn context digest {turn.context_digest} does not match its content",
                type="ContextDigestMismatch", non_retryable=True,
            )  # fmt: skip
        # Stored in its own key order, not the canonical one: providers cache prompts by
        # exact prefix, and the tools must reach them byte for byte as on the first turn.
        body = json.dumps(context, separators=(",", ":"), ensure_ascii=False)
        await self._transcripts.put_context(turn.context_digest, body)
        return turn

    @activity.defn(name=MODEL_TURN_ACTIVITY)
    async def model_turn(self, turn: ModelTurnInput) -> ModelTurnResult:
        log = activity_logger(step=turn.step, route=turn.model_route)
        try:
            turn = await self._with_context(turn)
            staged = await self._transcripts.stage(turn.run_id, turn.parent_ref, turn.new_items)
        except TranscriptMissingError as err:
            raise _transcript_missing(err) from err
        # The node commits while the model works, so the model call does not wait on it: its
        # ref reaches history only in this activity's result, which waits for the write, and
        # a write that finds its parent gone fails the turn (test_turn_context.py).
        write = asyncio.ensure_future(staged.commit())
        try:
            response, ms = await self._respond(turn, staged.items, log)
        except BaseException:
            done = await asyncio.gather(write, return_exceptions=True)
            if isinstance(done[0], TranscriptMissingError):
                raise _transcript_missing(done[0]) from done[0]
            raise
        try:
            await write
        except TranscriptMissingError as err:
            raise _transcript_missing(err) from err
        ref = staged.ref
        usage = response.usage
        log.info(
            "model_turn",
            transcript_ref=ref,
            items=len(staged.bodies_all),
            new_items=len(turn.new_items),
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            ms=ms,
        )
        return ModelTurnResult(
            output=[item.model_dump(mode="json", exclude_unset=True) for item in response.output],
            usage=TurnUsage(
                requests=usage.requests,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                total_tokens=usage.total_tokens,
            ),
            response_id=response.response_id,
            transcript_ref=ref,
            context_stored=turn.context_digest,
        )

    async def _respond(
        self, turn: ModelTurnInput, items: list[dict[str, Any]], log: Any
    ) -> tuple[ModelResponse, float]:
        """The model's response to the transcript, and how long the call took (ms)."""
        model_input = await self._transcripts.expand_markers(items)
        try:
            model = self._router.get(turn.model_route)
        except (RouteError, OSError, ValueError) as err:
            raise ApplicationError(str(err), type="ModelRouteError", non_retryable=True) from err
        started = time.perf_counter()
        try:
            async with heartbeating():
                response = await model.get_response(
                    system_instructions=turn.system_instructions,
                    input=model_input,  # type: ignore[arg-type]
                    model_settings=ModelSettings(**turn.model_settings),
                    tools=[_tool(t) for t in turn.tools],
                    output_schema=_OutputSchema(turn.output_schema) if turn.output_schema else None,
                    handoffs=[_handoff(h) for h in turn.handoffs],
                    tracing=ModelTracing.DISABLED,
                    previous_response_id=turn.previous_response_id,
                    conversation_id=turn.conversation_id,
                    prompt=None,
                )
        except openai.APIStatusError as err:
            code = err.code if isinstance(err.code, str) else None
            posture = classify_http_status(err.status_code, err.response.headers, code)
            log.warning("model_call_failed", status=err.status_code, retryable=posture.retryable)
            raise ApplicationError(
                f"model provider: {posture.reason}: {err.message}",
                type="ModelHTTPError",
                non_retryable=not posture.retryable,
                next_retry_delay=posture.delay,
            ) from err
        except (openai.APIConnectionError, openai.APITimeoutError) as err:
            log.warning("model_call_unreachable", error=str(err))
            raise ApplicationError(
                f"model provider unreachable: {err}", type="ModelUnreachable"
            ) from err
        except ScriptExhaustedError as err:
            raise ApplicationError(str(err), type="ScriptExhausted", non_retryable=True) from err
        return response, round((time.perf_counter() - started) * 1000, 1)
