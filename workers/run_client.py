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
    if not spec.policy and spec.release.agent in catalog.CATALOG:
        spec = spec.model_copy(update={"policy": catalog.policy_snapshot(spec.release.agent)})
    return await client.start_workflow(
        RUN_WORKFLOW_TYPE,
        spec,
        id=workflow_id_for(spec.run_id),
        task_queue=task_queue,
        result_type=RunResult,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        # A closed run's id is never reused: the run_id names one Run for good.
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        search_attributes=initial_attributes(
            spec.release.agent, spec.tenant, spec.release.release_id
        ),
    )
