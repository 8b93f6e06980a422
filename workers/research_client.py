"""Start a research run from outside a workflow (CLI, demo, tests, benchmarks)."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

from contracts.research import RESEARCH_WORKFLOW_TYPE, ResearchSpec
from contracts.run import RunResult, workflow_id_for
from contracts.search_attributes import initial_attributes

DEFAULT_PACKAGES = ("temporalio", "agents", "psycopg", "pydantic", "structlog")


async def start_research(
    client: Client, spec: ResearchSpec, task_queue: str
) -> WorkflowHandle[Any, RunResult]:
    """Start it, or return the one already running under this run_id (never a second)."""
    return await client.start_workflow(
        RESEARCH_WORKFLOW_TYPE,
        spec,
        id=workflow_id_for(spec.run_id),
        task_queue=task_queue,
        result_type=RunResult,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        search_attributes=initial_attributes("research", spec.tenant, "flagship"),
    )
