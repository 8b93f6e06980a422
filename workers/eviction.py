"""Tear down the workflow runs a stopping worker still holds in its cache.

In temporalio 1.35, Core reports a worker's shutdown as complete without evicting idle
cached runs: a run waiting for an approval or a wake-up has no pending work, so it never
receives a remove-from-cache job. Its coroutines stay suspended until the garbage collector
closes them, on whatever thread and event loop happen to collect. The `finally` blocks of the
agent loop then run outside the run's context (openai-agents resets its tracing context
variables from a foreign Context and Python prints "Exception ignored" tracebacks), and
anything they do could cross into another run. The SDK describes the bug and a fix in
sdk-python PR 1849, which 1.35 does not have.

`EvictOnShutdown` runs the SDK's own eviction activation for every run left in the cache once
the worker has stopped, so each is cancelled and unwound inside its own workflow event loop,
as a normal eviction would. It reads the SDK's private run map; if a later SDK changes it,
`cached_runs` finds nothing and the plugin does nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import structlog
from temporalio.bridge.proto.workflow_activation import (
    RemoveFromCache,
    WorkflowActivation,
    WorkflowActivationJob,
)
from temporalio.client import WorkflowHistory
from temporalio.worker import (
    Plugin,
    Replayer,
    ReplayerConfig,
    Worker,
    WorkerConfig,
    WorkflowReplayResult,
)

log = structlog.get_logger("groundwork.worker")

# As long as the SDK's deadlock detector allows a workflow activation: an eviction that has
# not unwound by then is stuck in user code and is left to the garbage collector.
EVICTION_TIMEOUT_S = 2.0


def cached_runs(worker: Worker) -> dict[str, Any]:
    """The run id -> running workflow map of the worker's workflow side ({} if none)."""
    runs = getattr(getattr(worker, "_workflow_worker", None), "_running_workflows", None)
    return runs if isinstance(runs, dict) else {}


async def evict_cached_runs(worker: Worker) -> int:
    """Evict every run still cached by a stopped worker; returns how many were evicted."""
    runs = cached_runs(worker)
    evicted = 0
    for run_id, running in list(runs.items()):
        activation = WorkflowActivation(
            run_id=run_id,
            jobs=[
                WorkflowActivationJob(
                    remove_from_cache=RemoveFromCache(
                        message="worker shut down",
                        reason=RemoveFromCache.EvictionReason.LANG_REQUESTED,
                    )
                )
            ],
        )
        try:
            # In a thread, as the SDK does: an activation installs its own event loop as the
            # thread's running loop and clears it afterwards.
            await asyncio.wait_for(
                asyncio.to_thread(running.activate, activation), EVICTION_TIMEOUT_S
            )
            evicted += 1
        except Exception as err:
            log.warning("eviction_failed", run_id=run_id, error=f"{type(err).__name__}: {err}")
        runs.pop(run_id, None)
    if evicted:
        log.info("cached_runs_evicted", runs=evicted)
    return evicted


class EvictOnShutdown(Plugin):
    """A worker plugin: after the worker stops, unwind the runs it still caches."""

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        return config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        try:
            await next(worker)
        finally:
            await evict_cached_runs(worker)

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        return config

    def run_replayer(
        self,
        replayer: Replayer,
        histories: AsyncIterator[WorkflowHistory],
        next: Callable[
            [Replayer, AsyncIterator[WorkflowHistory]],
            AbstractAsyncContextManager[AsyncIterator[WorkflowReplayResult]],
        ],
    ) -> AbstractAsyncContextManager[AsyncIterator[WorkflowReplayResult]]:
        return next(replayer, histories)
