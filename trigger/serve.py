"""Run the trigger service (`groundwork serve`)."""

from __future__ import annotations

import uvicorn

from trigger.app import create_app
from trigger.config import TriggerSettings
from workers.client import connect
from workers.settings import Settings


async def serve(
    settings: Settings, trigger: TriggerSettings, temporal_address: str, database_url: str
) -> None:
    client = await connect(temporal_address, settings.temporal_namespace)
    app = create_app(
        trigger,
        database_url=database_url,
        temporal=client,
        task_queue=settings.task_queue,
        approvers=settings.approvers,
    )
    config = uvicorn.Config(
        app, host=trigger.host, port=trigger.port, log_config=None, access_log=False
    )
    await uvicorn.Server(config).serve()
