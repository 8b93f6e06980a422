"""Logger bound to the running activity: run_id, workflow_id, activity type and attempt."""

from __future__ import annotations

from typing import Any

import structlog
from temporalio import activity

from contracts.run import run_id_from_workflow_id


def activity_logger(**extra: Any) -> Any:
    info = activity.info()
    workflow_id = info.workflow_id or ""
    return structlog.get_logger("groundwork.activity").bind(
        run_id=run_id_from_workflow_id(workflow_id),
        workflow_id=workflow_id,
        activity=info.activity_type,
        attempt=info.attempt,
        **extra,
    )
