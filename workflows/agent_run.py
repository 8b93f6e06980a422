"""AgentRunWorkflow: one agent Run, durable. The openai-agents loop runs here; every model
turn and every tool call is an activity, budgets are checked before each action, and each
status change follows the transition table and is mirrored to search attributes.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, NoReturn, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from agents import (
        Agent,
        AgentsException,
        FunctionTool,
        Handoff,
        RunConfig,
        RunContextWrapper,
        RunHooks,
        Runner,
    )
    from agents.tool_context import ToolContext

    from definitions import catalog
    from definitions.governed import effect_of
    from definitions.waits import is_wait_tool

from contracts.continuation import CONTINUE_AS_NEW_PATCH, RunCarryOver, resumed_marker
from contracts.model_turn import ModelTurnResult
from contracts.run import (
    EffectClass,
    RunResult,
    RunSpec,
    RunState,
    ToolExecution,
    workflow_id_for,
)
from contracts.session import STEER_APPLIED_SIGNAL, STEER_SIGNAL, SteerApplied, SteerInput
from contracts.status import FailureReason, RunStatus
from contracts.tool_call import (
    LOCAL_READS_PATCH,
    TOOL_CALL_ACTIVITY,
    ToolCallInput,
    ToolCallResult,
)
from workflows._effects import EffectsMixin
from workflows._model_stub import (
    ContinueAsNewNeededError,
    TurnHooks,
    WorkflowModel,
    WorkflowModelProvider,
)
from workflows._run_base import LOCAL_RETRY_THRESHOLD, TOOL_RETRY, RunAbortedError
from workflows._tool_gateway import UngovernableToolError, govern
from workflows._waits import WaitsMixin

_E = TypeVar("_E", bound=BaseException)


@workflow.defn(name="AgentRun")
class AgentRunWorkflow(EffectsMixin, WaitsMixin):
    @workflow.init
    def __init__(self, spec: RunSpec, carry: RunCarryOver | None = None) -> None:
        spec = _typed(spec)
        self._spec = spec
        self._state = RunState(
            run_id=spec.run_id,
            agent=spec.release.agent,
            tenant=spec.tenant,
            principal=spec.principal,
            budgets=spec.budgets,
        )
        self._current_agent = spec.release.agent
        self._init_run_parts()
        self._steers: list[SteerInput] = []
        """Steers received and not yet injected; see `_take_steers`."""
        self._steers_seen: set[str] = set()
        self._loop_agent: str | None = None
        """`Agent.name` of the agent the SDK's loop runs now (it changes on a handoff)."""
        self._tools_used_by: set[str] = set()
        if carry is not None:
            self._tools_used_by = set(carry.tools_used_by)
            self._state = carry.state
            self._steers = list(carry.steers)
            self._steers_seen = set(carry.steers_seen)
            self._decided = dict(carry.decided)
            self._latest_revision = dict(carry.latest_revision)
            self._ended = dict(carry.ended)
            self._resolved = dict(carry.resolved)
            self._delivered = {key: dict(value) for key, value in carry.delivered.items()}

    @workflow.query
    def get_state(self) -> RunState:
        return self._state

    @workflow.signal(name=STEER_SIGNAL)
    def steer(self, steer: SteerInput) -> None:
        """Text for the model, injected as a user message before the next model turn."""
        if steer.input_id in self._steers_seen:
            return
        self._steers_seen.add(steer.input_id)
        if self._state.status.is_terminal:
            self._event("SteerIgnored", input_id=steer.input_id, reason="run has ended")
            return
        self._steers.append(steer)
        self._event("SteerReceived", input_id=steer.input_id, principal=steer.principal)

    @workflow.run
    async def run(self, spec: RunSpec, carry: RunCarryOver | None = None) -> RunResult:
        spec = self._spec
        if carry is None:
            self._transition(RunStatus.RUNNING, "RunStarted", input_chars=len(spec.input))
        else:
            self._event(
                "RunContinued",
                execution=carry.execution,
                transcript_ref=carry.transcript_ref,
                pending_items=len(carry.pending_items),
            )
        expected_id = workflow_id_for(spec.run_id)
        if workflow.info().workflow_id != expected_id:
            return self._fail(
                FailureReason.AGENT_ERROR,
                f"workflow id must be {expected_id!r} for run_id {spec.run_id!r}",
            )
        try:
            agent = govern(catalog.build(spec.release.agent), self._invoke_tool)
        except (catalog.UnknownAgentError, UngovernableToolError) as err:
            return self._fail(FailureReason.AGENT_ERROR, str(err))
        run_input: str | list[Any] = spec.input
        if carry is not None:
            resumed = _find_agent(agent, carry.agent)
            if resumed is None:
                return self._fail(
                    FailureReason.AGENT_ERROR,
                    f"agent {carry.agent!r} the run continued in is not in {spec.release.agent!r}",
                )
            # Input guardrails ran when the run began; the marker is not user input. The SDK
            # forces an agent's tool_choice only until it has used a tool, which a fresh loop
            # would not know.
            settings = resumed.model_settings
            if resumed.reset_tool_choice and resumed.name in self._tools_used_by:
                settings = dataclasses.replace(settings, tool_choice=None)
            agent = resumed.clone(input_guardrails=[], model_settings=settings)
            run_input = [resumed_marker(carry.transcript_ref), *carry.pending_items]
        model = WorkflowModel(
            run_id=spec.run_id,
            route=spec.release.model_route,
            agent_name=lambda: self._current_agent,
            hooks=TurnHooks(
                before=self._before_model_turn,
                after=self._after_model_turn,
                inject=self._take_steers,
                continue_as_new=self._history_is_long,
            ),
            task_queue=spec.model_task_queue,
            timeout=timedelta(seconds=spec.timeouts.model_turn_s),
            heartbeat=timedelta(seconds=spec.timeouts.heartbeat_s),
            resumed_from=carry.transcript_ref if carry is not None else None,
        )
        try:
            result = await Runner.run(
                agent,
                run_input,
                hooks=_LoopAgent(self),
                run_config=RunConfig(
                    model_provider=WorkflowModelProvider(model),
                    tracing_disabled=True,
                    workflow_name=f"run-{spec.run_id}",
                ),
                # Our step budget is the limit; the SDK's own must never be the one that trips.
                max_turns=spec.budgets.max_steps + 1,
            )
        except asyncio.CancelledError:
            self._cancelled()
            raise
        except Exception as err:
            stop = _found_in(err, ContinueAsNewNeededError)
            if stop is not None:
                await self._continue_as_new(spec, carry, stop)
            if self._must_fail is not None:
                self._fail(*self._must_fail)
            if _cancellation_in(err):
                self._cancelled()
                raise CancelledError("run cancelled") from err
            if isinstance(err, ActivityError):
                self._fail(*self._activity_failure(err))
            if isinstance(err, AgentsException):
                self._fail(FailureReason.AGENT_ERROR, f"{type(err).__name__}: {err}")
            raise  # anything else is a bug: fail the workflow task, fix, and the run resumes
        if self._must_fail is not None:
            # An error raised inside a tool can be swallowed by the SDK; it still ends the run.
            self._fail(*self._must_fail)
        output = result.final_output
        text = output if isinstance(output, str) else _to_text(output)
        self._state.final_output = text
        self._transition(RunStatus.COMPLETED, "RunCompleted", output_chars=len(text))
        return self._result()

    # -- continuing as new ----------------------------------------------------------------

    def _history_is_long(self) -> bool:
        info = workflow.info()
        long = (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self._spec.continue_as_new_after_events
        )
        # Asked only once the history is long, so a run that never continues has no marker.
        return long and workflow.patched(CONTINUE_AS_NEW_PATCH)

    async def _continue_as_new(
        self, spec: RunSpec, carry: RunCarryOver | None, stop: ContinueAsNewNeededError
    ) -> NoReturn:
        """Close this execution and start the next one where the loop stopped."""
        assert self._loop_agent is not None  # set before the loop's first turn
        # A signal handler still running (an acknowledgement in flight) would be cut off.
        await workflow.wait_condition(workflow.all_handlers_finished)
        execution = (carry.execution if carry is not None else 1) + 1
        self._event(
            "RunContinuing",
            execution=execution,
            history_events=workflow.info().get_current_history_length(),
            pending_items=len(stop.pending_items),
        )
        workflow.logger.info(
            "run continues as new (execution %d)", execution, extra={"run_id": spec.run_id}
        )
        workflow.continue_as_new(
            args=[
                spec,
                RunCarryOver(
                    execution=execution,
                    state=self._state,
                    agent=self._loop_agent,
                    transcript_ref=stop.transcript_ref,
                    pending_items=stop.pending_items,
                    tools_used_by=sorted(self._tools_used_by),
                    steers=self._steers,
                    steers_seen=sorted(self._steers_seen),
                    decided=self._decided,
                    latest_revision=self._latest_revision,
                    ended=self._ended,
                    resolved=self._resolved,
                    delivered=self._delivered,
                ),
            ],
            search_attributes=workflow.info().typed_search_attributes,
        )

    # -- budgets, model turns, the tool door ---------------------------------------------

    def _before_model_turn(self) -> int:
        usage, budgets = self._state.usage, self._spec.budgets
        if usage.steps >= budgets.max_steps:
            raise self._exhaust(
                f"max_steps={budgets.max_steps} reached before step {usage.steps + 1}"
            )
        if usage.tokens >= budgets.max_tokens:
            raise self._exhaust(f"max_tokens={budgets.max_tokens} reached ({usage.tokens} used)")
        usage.steps += 1
        self._state.step = usage.steps
        return usage.steps

    async def _take_steers(self, step: int) -> list[dict[str, Any]]:
        """The steers that arrived since the last turn, as user messages for turn `step`.

        Each becomes part of the transcript the model sees from this turn on; the session
        that sent it is told (and the signal awaited) before the turn is scheduled, so the
        session knows it was applied before it can see this run end.
        """
        if not self._steers:
            return []
        taken, self._steers = self._steers, []
        for steer in taken:
            self._state.steered.append(steer.input_id)
            self._event("SteerApplied", input_id=steer.input_id, step=step)
        for steer in taken:
            if steer.reply_to is None:
                continue
            try:
                await workflow.get_external_workflow_handle(steer.reply_to).signal(
                    STEER_APPLIED_SIGNAL,
                    SteerApplied(input_id=steer.input_id, run_id=self._spec.run_id, step=step),
                )
            except Exception as err:  # the session is gone; the steer is applied all the same
                workflow.logger.warning(
                    "steer acknowledgement failed",
                    extra={"run_id": self._spec.run_id, "error": str(err)},
                )
        return [{"role": "user", "content": steer.text} for steer in taken]

    def _after_model_turn(self, result: ModelTurnResult) -> None:
        usage = self._state.usage
        usage.input_tokens += result.usage.input_tokens
        usage.output_tokens += result.usage.output_tokens
        self._state.transcript_ref = result.transcript_ref
        calls = [o.get("name") for o in result.output if o.get("type") == "function_call"]
        if calls and self._loop_agent is not None:
            self._tools_used_by.add(self._loop_agent)
        self._event(
            "ModelTurnCompleted",
            step=usage.steps,
            tool_calls=calls,
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
        )

    async def _invoke_tool(
        self, agent_name: str, tool: FunctionTool, ctx: ToolContext[Any], arguments: str
    ) -> str:
        usage, budgets = self._state.usage, self._spec.budgets
        if self._must_fail is not None:
            raise RunAbortedError(self._must_fail[1])
        if usage.tool_calls >= budgets.max_tool_calls:
            raise self._exhaust(
                f"max_tool_calls={budgets.max_tool_calls} reached before calling {tool.name}"
            )
        if is_wait_tool(tool):
            return await self._wait_for_event(ctx, arguments)
        declaration = effect_of(tool)
        policy = self._policy(tool.name, declaration)
        if declaration is not None:
            # A declared effect always takes the ledger path; a snapshot cannot downgrade it to a read.
            if policy.effect_class is EffectClass.READ:
                policy = policy.model_copy(update={"effect_class": declaration.effect_class})
            return await self._invoke_effect(agent_name, tool, declaration, policy, ctx, arguments)
        if not policy.allowed:
            self._event("ToolDenied", tool=tool.name, call_id=ctx.tool_call_id)
            return f"denied: tool {tool.name!r} is not allowed for this run (policy {self._spec.release.policy_version})"
        usage.tool_calls += 1
        self._event("ToolCalled", tool=tool.name, call_id=ctx.tool_call_id, step=usage.steps)
        call = ToolCallInput(
            run_id=self._spec.run_id,
            step=usage.steps,
            agent_name=self._spec.release.agent,
            owner_agent=agent_name,
            tool_name=tool.name,
            call_id=ctx.tool_call_id,
            arguments=arguments,
            effect_class=policy.effect_class,
        )
        timeout = timedelta(seconds=self._spec.timeouts.tool_call_s)
        summary = f"{tool.name} ({policy.effect_class.value})"
        result: ToolCallResult
        # Runs recorded before reads became local activities replay their ordinary ones.
        if policy.execution is ToolExecution.LOCAL and workflow.patched(LOCAL_READS_PATCH):
            result = await workflow.execute_local_activity(
                TOOL_CALL_ACTIVITY, call, result_type=ToolCallResult,
                start_to_close_timeout=timeout, retry_policy=TOOL_RETRY, summary=summary,
                local_retry_threshold=LOCAL_RETRY_THRESHOLD,
            )  # fmt: skip
        else:
            result = await workflow.execute_activity(
                TOOL_CALL_ACTIVITY, call, result_type=ToolCallResult,
                start_to_close_timeout=timeout,
                heartbeat_timeout=timedelta(seconds=self._spec.timeouts.heartbeat_s),
                retry_policy=TOOL_RETRY, summary=summary,
            )  # fmt: skip
        self._event(
            "ToolReturned",
            tool=tool.name,
            call_id=ctx.tool_call_id,
            output_bytes=result.output_bytes,
            stored=result.stored_ref is not None,
            error=result.error,
        )
        return result.output

    @staticmethod
    def _activity_failure(err: ActivityError) -> tuple[FailureReason, str]:
        cause: BaseException | None = err.cause
        message = str(cause) if cause else str(err)
        kind = FailureReason.INTERNAL
        if isinstance(cause, ApplicationError) and cause.type:
            kind = (
                FailureReason.TOOL_ERROR
                if cause.type == "UnknownAgent"
                else FailureReason.MODEL_ERROR
            )
        if isinstance(cause, FailureError) and "tool_call" in (err.activity_type or ""):
            kind = FailureReason.TOOL_ERROR
        return kind, f"{err.activity_type}: {message}"


def _typed(spec: RunSpec | dict[str, Any]) -> RunSpec:
    """Temporal types a workflow's arguments only when as many came as the signature has; a
    run started with its spec alone (every start but a continuation) arrives as plain JSON."""
    return spec if isinstance(spec, RunSpec) else RunSpec.model_validate(spec)


class _LoopAgent(RunHooks[Any]):
    """Keeps the name of the agent the SDK's loop is on, which a continued run resumes in."""

    def __init__(self, run: AgentRunWorkflow) -> None:
        self._run = run

    async def on_agent_start(self, context: RunContextWrapper[Any], agent: Agent[Any]) -> None:
        self._run._loop_agent = agent.name


def _find_agent(root: Agent[Any], name: str) -> Agent[Any] | None:
    """The agent called `name` among `root` and the agents its handoffs reach."""
    seen: set[int] = set()
    todo: list[Agent[Any]] = [root]
    while todo:
        agent = todo.pop()
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        if agent.name == name:
            return agent
        for target in agent.handoffs:
            if isinstance(target, Agent):
                todo.append(target)
            elif isinstance(target, Handoff) and target._agent_ref is not None:
                referenced = target._agent_ref()
                if isinstance(referenced, Agent):
                    todo.append(referenced)
    return None


def _chain(err: BaseException) -> Iterator[BaseException]:
    """err and what it wraps (the SDK wraps what a model or a tool raised)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _found_in(err: BaseException, kind: type[_E]) -> _E | None:
    return next((e for e in _chain(err) if isinstance(e, kind)), None)


def _cancellation_in(err: BaseException) -> bool:
    """Whether a Temporal cancellation hides in the chain."""
    return any(
        isinstance(e, CancelledError | asyncio.CancelledError)
        or (isinstance(e, ActivityError) and isinstance(e.cause, CancelledError))
        for e in _chain(err)
    )


def _to_text(output: Any) -> str:
    if hasattr(output, "model_dump_json"):
        return str(output.model_dump_json())
    return str(output)
