"""SessionWorkflow: one per (tenant, session id); it serializes the session's runs.

Commands arrive as `command` signals and land in an inbox; the main loop alone acts on
them, in arrival order, so every decision is deterministic:

- ENQUEUE: to the back of the queue (an idle session starts it at once).
- INTERRUPT: ahead of the queue (after interrupts already waiting there), and the active
  run is cancelled; the next run starts only once the cancelled one has ended.
- STEER: signalled to the active run, which injects the text as a user message before its
  next model turn and acknowledges with `steer_applied`. With no active run (or one being
  interrupted) it is queued as ENQUEUE; a steer the run ended without applying is queued
  next, as its own run.

Each run is an `AgentRun` child workflow with id `run-<run id>`; the run id derives from the
input id, and the session remembers every input it saw, so a redelivered command neither
queues nor runs twice. When Temporal suggests it (or after `runs_per_execution` runs) an
idle session continues as new, carrying its queue, its recent runs and what it remembers.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import (
    CancelledError,
    ChildWorkflowError,
    TerminatedError,
    TimeoutError,
    WorkflowAlreadyStartedError,
)

from contracts.run import RUN_WORKFLOW_TYPE, RunResult, workflow_id_for
from contracts.search_attributes import initial_attributes
from contracts.session import (
    COMMAND_SIGNAL,
    MAX_COMPLETED_RUNS,
    MAX_REMEMBERED_INPUTS,
    STEER_APPLIED_SIGNAL,
    STEER_SIGNAL,
    ActiveRun,
    InputState,
    QueuedRun,
    SessionCarry,
    SessionCommand,
    SessionInputStatus,
    SessionMode,
    SessionRun,
    SessionStart,
    SessionState,
    SteerApplied,
    SteerInput,
)
from contracts.status import RunStatus


@workflow.defn(name="Session")
class SessionWorkflow:
    @workflow.init
    def __init__(self, start: SessionStart) -> None:
        carry = start.carry or SessionCarry()
        self._start = start
        self._queue: list[SessionCommand] = list(carry.queue)
        self._completed: list[SessionRun] = list(carry.completed)
        self._inputs: dict[str, SessionInputStatus] = dict(carry.inputs)
        self._runs_started = carry.runs_started
        self._executions = carry.executions
        self._runs_this_execution = 0
        self._inbox: list[SessionCommand] = []
        self._active: ActiveRun | None = None
        self._handle: workflow.ChildWorkflowHandle[Any, RunResult] | None = None
        self._steers_in_flight: dict[str, SessionCommand] = {}
        """Steers sent to the active run, kept until it ends (queued then if not applied)."""

    # -- messages -------------------------------------------------------------------------

    @workflow.signal(name=COMMAND_SIGNAL)
    def command(self, command: SessionCommand) -> None:
        self._inbox.append(command)

    @workflow.signal(name=STEER_APPLIED_SIGNAL)
    def steer_applied(self, ack: SteerApplied) -> None:
        status = self._inputs.get(ack.input_id)
        if status is not None and status.state is InputState.STEER_SENT:
            status.state = InputState.STEERED
            status.step = ack.step
            status.note = f"injected before model turn {ack.step} of {ack.run_id}"

    @workflow.query
    def get_state(self) -> SessionState:
        return SessionState(
            session_id=self._start.session_id,
            tenant=self._start.tenant,
            workflow_id=workflow.info().workflow_id,
            active=self._active,
            queue=[
                QueuedRun(
                    input_id=c.input_id,
                    mode=c.mode,
                    run_id=c.spec.run_id,
                    note=self._inputs[c.input_id].note if c.input_id in self._inputs else "",
                )
                for c in self._queue
            ],
            completed=self._completed,
            runs_started=self._runs_started,
            executions=self._executions,
        )

    @workflow.query
    def get_input(self, input_id: str) -> SessionInputStatus:
        status = self._inputs.get(input_id)
        if status is not None:
            return status
        return SessionInputStatus(
            input_id=input_id,
            mode=SessionMode.ENQUEUE,
            state=InputState.UNKNOWN,
            run_id="",
        )

    # -- the loop -------------------------------------------------------------------------

    @workflow.run
    async def run(self, start: SessionStart) -> SessionState:
        while True:
            await workflow.wait_condition(self._has_work)
            while self._inbox:
                await self._accept(self._inbox.pop(0))
            if self._handle is not None and self._handle.done():
                self._settle_active()
            if self._active is None:
                if self._should_rotate():
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    if not self._inbox:
                        workflow.continue_as_new(
                            SessionStart(
                                tenant=start.tenant,
                                session_id=start.session_id,
                                carry=self._carry(),
                                runs_per_execution=start.runs_per_execution,
                            )
                        )
                    continue
                if self._queue:
                    await self._start_next()

    def _has_work(self) -> bool:
        if self._inbox:
            return True
        if self._handle is not None:
            return self._handle.done()
        return bool(self._queue) or self._should_rotate()

    def _should_rotate(self) -> bool:
        return (
            self._runs_this_execution >= self._start.runs_per_execution
            or workflow.info().is_continue_as_new_suggested()
        )

    async def _accept(self, command: SessionCommand) -> None:
        if command.input_id in self._inputs:
            workflow.logger.info(
                "session: duplicate command ignored", extra={"input_id": command.input_id}
            )
            return
        if command.mode is SessionMode.STEER:
            await self._steer(command)
            return
        status = SessionInputStatus(
            input_id=command.input_id,
            mode=command.mode,
            state=InputState.QUEUED,
            run_id=command.spec.run_id,
        )
        self._inputs[command.input_id] = status
        if command.mode is SessionMode.INTERRUPT:
            self._queue.insert(self._interrupt_lane_end(), command)
            if self._active is not None and self._handle is not None:
                if self._active.interrupted_by is None:
                    self._active.interrupted_by = command.input_id
                    self._handle.cancel()
                    status.note = f"interrupts {self._active.run_id}"
                else:
                    status.note = f"queued behind interrupt {self._active.interrupted_by}"
            else:
                status.note = "nothing to interrupt"
        else:
            self._queue.append(command)
            if self._active is not None:
                status.note = f"queued behind {self._active.run_id}"

    async def _steer(self, command: SessionCommand) -> None:
        active, handle = self._active, self._handle
        if active is None or handle is None or handle.done() or active.interrupted_by:
            why = "no active run to steer" if active is None else "the active run is ending"
            self._queue_steer(command, f"queued: {why}")
            return
        self._inputs[command.input_id] = SessionInputStatus(
            input_id=command.input_id,
            mode=command.mode,
            state=InputState.STEER_SENT,
            run_id=active.run_id,
            note=f"sent to {active.run_id}",
        )
        active.steers.append(command.input_id)
        self._steers_in_flight[command.input_id] = command
        try:
            await handle.signal(
                STEER_SIGNAL,
                SteerInput(
                    input_id=command.input_id,
                    text=command.text,
                    principal=command.principal,
                    reply_to=workflow.info().workflow_id,
                ),
            )
        except Exception as err:  # the run closed meanwhile: settling it queues the steer
            workflow.logger.warning(
                "session: steer signal failed",
                extra={"input_id": command.input_id, "error": str(err)},
            )

    def _queue_steer(self, command: SessionCommand, note: str, at: int | None = None) -> None:
        self._inputs[command.input_id] = SessionInputStatus(
            input_id=command.input_id,
            mode=command.mode,
            state=InputState.QUEUED,
            run_id=command.spec.run_id,
            note=note,
        )
        self._queue.insert(len(self._queue) if at is None else at, command)

    def _interrupt_lane_end(self) -> int:
        lane = 0
        while lane < len(self._queue) and self._queue[lane].mode is SessionMode.INTERRUPT:
            lane += 1
        return lane

    async def _start_next(self) -> None:
        command = self._queue.pop(0)
        spec = command.spec
        status = self._inputs[command.input_id]
        try:
            handle = await workflow.start_child_workflow(
                RUN_WORKFLOW_TYPE,
                spec,
                id=workflow_id_for(spec.run_id),
                result_type=RunResult,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                search_attributes=initial_attributes(
                    spec.release.agent, spec.tenant, spec.release.release_id
                ),
                static_summary=f"{command.mode.value} {command.input_id}",
            )
        except WorkflowAlreadyStartedError:
            status.state = InputState.DUPLICATE_RUN
            status.note = f"{spec.run_id} already existed; not started again"
            return
        self._runs_started += 1
        self._runs_this_execution += 1
        self._handle = handle
        self._active = ActiveRun(
            run_id=spec.run_id,
            input_id=command.input_id,
            mode=command.mode,
            started_at=workflow.now(),
        )
        status.state = InputState.RUNNING
        workflow.logger.info(
            "session: run started", extra={"run_id": spec.run_id, "input_id": command.input_id}
        )

    def _settle_active(self) -> None:
        assert self._handle is not None
        assert self._active is not None
        active, handle = self._active, self._handle
        self._active, self._handle = None, None
        run_status = _ended_status(handle)
        self._completed = [
            *self._completed,
            SessionRun(
                run_id=active.run_id,
                input_id=active.input_id,
                mode=active.mode,
                status=run_status,
                started_at=active.started_at,
                ended_at=workflow.now(),
                interrupted_by=active.interrupted_by,
                steers=active.steers,
            ),
        ][-MAX_COMPLETED_RUNS:]
        own = self._inputs.get(active.input_id)
        if own is not None:
            own.state = InputState.ENDED
            own.run_status = run_status
        # A steer the run never applied becomes its own run, next in line (after interrupts),
        # in the order the steers arrived.
        sent = [self._steers_in_flight.pop(input_id) for input_id in active.steers]
        unapplied = [c for c in sent if self._inputs[c.input_id].state is InputState.STEER_SENT]
        lane = self._interrupt_lane_end()
        for offset, command in enumerate(unapplied):
            note = f"queued: {active.run_id} ended ({run_status}) before applying it"
            self._queue_steer(command, note, at=lane + offset)
        workflow.logger.info(
            "session: run ended", extra={"run_id": active.run_id, "status": run_status}
        )

    def _carry(self) -> SessionCarry:
        keep = {c.input_id for c in self._queue}
        inputs = dict(self._inputs)
        forgettable = [k for k in inputs if k not in keep]
        for input_id in forgettable[: max(0, len(inputs) - MAX_REMEMBERED_INPUTS)]:
            del inputs[input_id]
        return SessionCarry(
            queue=self._queue,
            completed=self._completed,
            inputs=inputs,
            runs_started=self._runs_started,
            executions=self._executions + 1,
        )


def _ended_status(handle: workflow.ChildWorkflowHandle[Any, RunResult]) -> str:
    try:
        result = handle.result()
    except ChildWorkflowError as err:
        cause = err.cause
        if isinstance(cause, CancelledError):
            return RunStatus.CANCELLED.value
        if isinstance(cause, TerminatedError):
            return "Terminated"
        if isinstance(cause, TimeoutError):
            return RunStatus.TIMED_OUT.value
        return RunStatus.FAILED.value
    except asyncio.CancelledError:
        return RunStatus.CANCELLED.value
    return result.status.value
