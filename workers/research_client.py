"""Start a research run from outside a workflow (CLI, demo, tests, benchmarks)."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowHandle

from contracts.research import RESEARCH_WORKFLOW_TYPE, ResearchSpec
from contracts.run import RunResult
from workers.run_client import start_once

DEFAULT_PACKAGES = ("temporalio", "agents", "psycopg", "pydantic", "structlog")


async def start_research(
    client: Client, spec: ResearchSpec, task_queue: str
) -> WorkflowHandle[Any, RunResult]:
    """Start it, or return the one already running under this run_id (never a second)."""
    return await start_once(
        client, RESEARCH_WORKFLOW_TYPE, spec, spec.run_id, task_queue,
        agent="research", tenant=spec.tenant, release="flagship",
    )  # fmt: skip
