"""The Run: what starts one (RunSpec), what it knows about itself (RunState), how it ends (RunResult)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contracts.approvals import ApprovalRequest
from contracts.status import FailureReason, RunStatus, WaitingReason

RUN_WORKFLOW_TYPE = "AgentRun"
WORKFLOW_ID_PREFIX = "run-"
MAX_LAST_EVENTS = 20


def workflow_id_for(run_id: str) -> str:
    """Every Run's workflow id is derived from our run_id, so starting it twice finds the same run."""
    return f"{WORKFLOW_ID_PREFIX}{run_id}"


def run_id_from_workflow_id(workflow_id: str) -> str:
    return workflow_id.removeprefix(WORKFLOW_ID_PREFIX)


class EffectClass(StrEnum):
    """How dangerous a tool's side effect is; decides retry, reconcile and approval."""

    READ = "read"
    IDEMPOTENT_WRITE = "idempotent_write"
    WRITE = "write"
    IRREVERSIBLE = "irreversible"


class ApprovalRule(StrEnum):
    NEVER = "never"
    ALWAYS = "always"


class ToolExecution(StrEnum):
    """Where a `read` tool call runs. Governed writes are always ordinary activities."""

    LOCAL = "local"
    """A local activity in the run's own worker: no task-queue round trip and three fewer
    history events per call; retried with backoff like any activity, and re-run if the
    worker dies before the result is recorded (harmless for a read). For quick reads."""
    ACTIVITY = "activity"
    """An ordinary activity: heartbeats, its own events and summary in the Web UI, and any
    worker of the task queue may run it. For reads that take long or must be watched."""


class ToolPolicy(BaseModel):
    """One tool's entry in the policy snapshot a Run carries."""

    model_config = ConfigDict(extra="forbid")

    effect_class: EffectClass = EffectClass.READ
    """The tool's effect class; undeclared tools are treated as `read`."""
    allowed: bool = True
    """A disallowed tool call becomes a denial the model sees as the tool result."""
    approval: ApprovalRule = ApprovalRule.NEVER
    execution: ToolExecution = ToolExecution.LOCAL
    """How a `read` call runs (ignored for governed writes, which go through the ledger)."""
    send_within_s: float = Field(default=3600.0, gt=0)
    """A governed call's deadline: how long after it is prepared its request may still be
    sent. A dispatch that has not sent it by then settles it `failed` and never sends it
    (asking the target about an earlier attempt stays allowed). A human's `not_committed`
    answer starts the window again."""


class Budgets(BaseModel):
    """Limits checked before each new action; exhaustion ends the run FAILED(budget)."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int = Field(default=20, ge=1)
    """Model turns the run may take."""
    max_tool_calls: int = Field(default=50, ge=0)
    max_tokens: int = Field(default=200_000, ge=1)
    """Total tokens (input + output) summed over model turns, as reported by the model."""


class ActivityTimeouts(BaseModel):
    """How long a model turn or tool call may take, and how fast a dead worker is noticed."""

    model_config = ConfigDict(extra="forbid")

    model_turn_s: float = Field(default=120.0, gt=0)
    tool_call_s: float = Field(default=120.0, gt=0)
    heartbeat_s: float = Field(default=20.0, gt=0)
    """A worker that dies mid-call is detected after this long, and the call is retried."""
    effect_retry_max_s: float = Field(default=20.0, gt=0)
    """Longest wait between attempts of a governed write's dispatch. A dispatch retries
    until it reaches a verdict (the ledger unreachable, a worker lost mid-call): the target's
    own failures end it after a few attempts, inside the activity."""


class BudgetUsage(BaseModel):
    steps: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class Release(BaseModel):
    """What exactly runs: the agent and the configuration pinned for this Run."""

    model_config = ConfigDict(extra="forbid")

    agent: str
    """Name of the agent in the worker's catalog."""
    release_id: str = "dev"
    model_route: str = "scripted:default"
    """`scripted:<file>`, `openai:<model>` or `openai-compatible:<base-url>|<model>`."""
    definition_hash: str = ""
    tool_schema_hash: str = ""
    policy_version: str = "1"

    @field_validator("model_route")
    @classmethod
    def _route_has_kind(cls, value: str) -> str:
        kind, sep, rest = value.partition(":")
        if not sep or not rest or kind not in {"scripted", "openai", "openai-compatible"}:
            raise ValueError(
                "model_route must be scripted:<file>, openai:<model> or openai-compatible:<base-url>|<model>"
            )
        return value


class RunSpec(BaseModel):
    """The input of AgentRunWorkflow: everything a Run needs, fixed when it starts."""

    model_config = ConfigDict(extra="forbid")

    run_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$")
    release: Release
    input: str = Field(min_length=1)
    principal: str = "local-user"
    tenant: str = "default"
    session_id: str | None = None
    budgets: Budgets = Field(default_factory=Budgets)
    policy: dict[str, ToolPolicy] = Field(default_factory=dict)
    """Policy snapshot: tool name -> effect class, allowed, approval rule."""
    timeouts: ActivityTimeouts = Field(default_factory=ActivityTimeouts)
    model_task_queue: str | None = None
    """Task queue for model-turn activities; defaults to the run's own queue."""
    continue_as_new_after_events: int = Field(default=10_000, ge=20, le=40_000)
    """Past this many history events, or when Temporal suggests it (4,096 events or 4 MiB with
    the server's defaults, so usually first), the run continues as new at its next turn
    boundary (contracts.continuation); Temporal's hard limit is 50K."""


class RunEvent(BaseModel):
    """One fact about a run, in order; every status transition is one."""

    seq: int
    type: str
    at: datetime
    data: dict[str, Any] = Field(default_factory=dict)


class RunState(BaseModel):
    """What `get_state` answers; also everything the workflow carries over."""

    run_id: str
    agent: str
    tenant: str
    principal: str | None = None
    """Who started the run (RunSpec.principal): over HTTP they may cancel it."""
    status: RunStatus = RunStatus.CREATED
    waiting_reason: WaitingReason | None = None
    failure_reason: FailureReason | None = None
    failure_message: str | None = None
    step: int = 0
    budgets: Budgets = Field(default_factory=Budgets)
    usage: BudgetUsage = Field(default_factory=BudgetUsage)
    last_events: list[RunEvent] = Field(default_factory=list)
    event_count: int = 0
    final_output: str | None = None
    transcript_ref: str | None = None
    input_cursor: int = 0
    """The newest input this run has consumed; its next wait matches only later inputs."""
    pending_approval: ApprovalRequest | None = None
    """The approval the run waits for, exactly as an approver must sign it."""
    steered: list[str] = Field(default_factory=list)
    """Input ids of the steers injected into the transcript, in order."""


class RunResult(BaseModel):
    """How a run ended; the workflow's result when COMPLETED, the failure details when FAILED."""

    run_id: str
    status: RunStatus
    final_output: str | None = None
    failure_reason: FailureReason | None = None
    failure_message: str | None = None
    usage: BudgetUsage = Field(default_factory=BudgetUsage)
    transcript_ref: str | None = None
