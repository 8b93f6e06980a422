"""Start and inspect Runs from outside a workflow (CLI, demo, tests, benchmarks)."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from contracts.run import RUN_WORKFLOW_TYPE, RunResult, RunSpec, workflow_id_for
from contracts.search_attributes import initial_attributes
from definitions import catalog


async def start_run(
    client: Client, spec: RunSpec, task_queue: str
) -> WorkflowHandle[Any, RunResult]:
    """Start the Run, or return the one with the same run_id, running or ended (never a
    second run).

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
    """Start a run's workflow under `run-<run_id>`, or return the one already there, running
    or closed: a closed run's id is never reused, the run_id names one Run for good."""
    try:
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
    except WorkflowAlreadyStartedError as err:
        # Only a closed run gets here (a running one is USE_EXISTING's). Its start may be
        # retried after it ended: a trigger activation replayed after a crash, a client whose
        # first answer was lost. That run is the answer, not an error.
        return client.get_workflow_handle(
            workflow_id_for(run_id), run_id=err.run_id, result_type=RunResult
        )
