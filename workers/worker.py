"""The Groundwork worker: AgentRunWorkflow and SessionWorkflow, plus the model-turn and
tool-call activities."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities._faults import SHARED_COMMIT, crash_plan
from activities.approvals import ApprovalActivities
from activities.effects import EffectActivities
from activities.model_turn import ModelTurnActivities
from activities.research import ResearchActivities
from activities.tool_call import ToolCallActivities
from activities.waits import WaitActivities
from adapters.approvals import ApprovalStore
from adapters.evidence import EvidenceStore
from adapters.ledger import EffectLedger
from adapters.models import ModelRouter
from adapters.models.routes import ModelRouterConfig
from adapters.pool import new_pool
from adapters.targets.registry import TargetRegistry
from adapters.transcripts import TranscriptStore
from adapters.waits import WaitStore
from workers import code_cache, payload_context
from workers.client import connect
from workers.eviction import EvictOnShutdown
from workers.relay import relay_forever
from workers.settings import Settings
from workflows.agent_run import AgentRunWorkflow
from workflows.research import ResearchWorkflow
from workflows.session import SessionWorkflow

log = structlog.get_logger(__name__)

# openai-agents imports lazily at run time, so passing modules through at import is not enough.
# `contracts` holds only constants, enums and pydantic models with no import-time effects;
# re-importing it in every workflow's sandbox rebuilt every model class per run (measured:
# ~30-45 % of worker CPU per run, see bench/RESULTS.md).
PASSTHROUGH_MODULES = ("agents", "openai", "definitions", "contracts", "httpx", "pydantic_core")


def sandbox_runner() -> SandboxedWorkflowRunner:
    """The workflow runner of every worker; installs, once per process, the compile cache
    (workers/code_cache.py) and the context-free payload passes (workers/payload_context.py)
    that make its per-run and per-payload work cheaper."""
    code_cache.install()
    payload_context.install()
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )


def prepare_agents_sdk() -> None:
    """No trace export, and a provider built outside the sandbox (it reads platform info)."""
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    from agents import set_trace_processors, set_tracing_disabled
    from agents.tracing import set_trace_provider
    from agents.tracing.provider import DefaultTraceProvider

    set_trace_provider(DefaultTraceProvider())
    set_trace_processors([])
    set_tracing_disabled(True)


@dataclass
class WorkerDeps:
    pool: AsyncConnectionPool
    router: ModelRouter
    transcripts: TranscriptStore
    ledger: EffectLedger
    targets: TargetRegistry


@asynccontextmanager
async def worker_deps(settings: Settings, database_url: str) -> AsyncIterator[WorkerDeps]:
    pool = new_pool(database_url, min_size=1, max_size=10, wait_s=settings.db_wait_s)
    await pool.open(wait=True, timeout=30)
    try:
        router = ModelRouter(
            ModelRouterConfig(
                openai_api_key=settings.openai_api_key,
                openai_base_url=settings.openai_base_url,
                compatible_api_key=settings.compatible_api_key,
                scripts_dir=settings.scripts_dir,
                scripted_call_log=settings.scripted_call_log,
            )
        )
        targets = TargetRegistry(settings.targets)
        try:
            yield WorkerDeps(
                pool=pool,
                router=router,
                transcripts=TranscriptStore(pool),
                ledger=EffectLedger(pool, after_shared_commit=_shared_commit_crash()),
                targets=targets,
            )
        finally:
            await targets.close()
    finally:
        await pool.close()


def _shared_commit_crash() -> Callable[[Sequence[dict[str, Any]]], None] | None:
    """The ledger's own crash point, armed like the dispatch's (activities/_faults.py); the
    marker names the statement's items, so a test knows which callers lost their answer."""
    plan = crash_plan()
    if plan.point != SHARED_COMMIT:
        return None

    def crash(items: Sequence[dict[str, Any]]) -> None:
        plan.crash(SHARED_COMMIT, " ".join(f"{i['op']}:{i['effect_key']}" for i in items))

    return crash


def build_worker(client: Client, task_queue: str, deps: WorkerDeps, settings: Settings) -> Worker:
    prepare_agents_sdk()
    models = ModelTurnActivities(deps.router, deps.transcripts)
    tools = ToolCallActivities(deps.transcripts)
    effects = EffectActivities(deps.ledger, deps.targets)
    approvals = ApprovalActivities(ApprovalStore(deps.pool), settings.approvers)
    waits = WaitActivities(WaitStore(deps.pool))
    research = ResearchActivities(EvidenceStore(deps.pool), deps.targets)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentRunWorkflow, ResearchWorkflow, SessionWorkflow],
        activities=[
            models.model_turn,
            tools.tool_call,
            effects.dispatch,
            effects.resolve,
            approvals.record,
            approvals.verify,
            waits.install,
            waits.close,
            research.pin_sources,
            research.seal_bundle,
            research.load_bundle,
            research.record_set,
            research.record_draft,
            research.record_event,
            research.verify_publication,
        ],
        workflow_runner=sandbox_runner(),
        max_concurrent_activities=settings.max_concurrent_activities,
        max_cached_workflows=settings.max_cached_workflows,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=settings.sticky_timeout_s),
        plugins=[EvictOnShutdown()],
    )


async def run_worker(settings: Settings, temporal_address: str, database_url: str) -> None:
    """Serve until SIGINT/SIGTERM, then finish in-flight tasks and exit."""
    client = await connect(temporal_address, settings.temporal_namespace)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker_deps(settings, database_url) as deps:
        worker = build_worker(client, settings.task_queue, deps, settings)
        log.info(
            "worker_started",
            task_queue=settings.task_queue,
            temporal=temporal_address,
            pid=os.getpid(),
        )
        relay = asyncio.create_task(relay_forever(client, WaitStore(deps.pool)))
        try:
            async with worker:
                await stop.wait()
        finally:
            relay.cancel()
        log.info("worker_stopped", task_queue=settings.task_queue)
