"""Start and inspect Runs from outside a workflow (CLI, demo, tests, benchmarks)."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

from contracts.run import RUN_WORKFLOW_TYPE, RunResult, RunSpec, workflow_id_for
from contracts.search_attributes import initial_attributes
from definitions import catalog


async def start_run(
    client: Client, spec: RunSpec, task_queue: str
) -> WorkflowHandle[Any, RunResult]:
    """Start the Run, or return the running one with the same run_id (never a second run).

    Without an explicit policy, the agent's declared policy is pinned into the spec.
    """
    if not spec.policy and catalog.has(spec.release.agent):
        spec = spec.model_copy(update={"policy": catalog.policy_snapshot(spec.release.agent)})
    return await start_once(
        client, RUN_WORKFLOW_TYPE, spec, spec.run_id, task_queue,
        agent=spec.release.agent, tenant=spec.tenant, release=spec.release.release_id,
    )  # fmt: skip


async def start_once(
    client: Client, workflow_type: str, arg: Any, run_id: str, task_queue: str, *,
    agent: str, tenant: str, release: str,
) -> WorkflowHandle[Any, RunResult]:  # fmt: skip
    """Start a run's workflow under `run-<run_id>`, or return the one already running; a
    closed run's id is never reused: the run_id names one Run for good."""
    return await client.start_workflow(
        workflow_type,
        arg,
        id=workflow_id_for(run_id),
        task_queue=task_queue,
        result_type=RunResult,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        search_attributes=initial_attributes(agent, tenant, release),
    )
