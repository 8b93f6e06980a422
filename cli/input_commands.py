"""`groundwork input submit`: log an input durably, then deliver it to waiting runs."""

from __future__ import annotations

import asyncio
import json

import typer
from psycopg_pool import AsyncConnectionPool

from adapters.waits import WaitStore
from cli._common import console, endpoints, fail, settings
from workers.client import connect
from workers.relay import signal_deliveries

input_app = typer.Typer(no_args_is_help=True, help="Inputs: events and context for runs.")


@input_app.command("submit")
def submit(
    type_: str = typer.Option(..., "--type", help="Event type, e.g. deploy.finished."),
    subject: str = typer.Option(..., "--subject", help="What it is about, e.g. service-a."),
    data: str = typer.Option("{}", "--data", help="JSON object."),
    source: str = typer.Option("cli", "--source"),
) -> None:
    """Log the input (durable first), then wake every run subscribed to (type, subject)."""
    try:
        payload = json.loads(data)
    except ValueError as err:
        fail(f"--data is not JSON: {err}", code=2)
    if not isinstance(payload, dict):
        fail("--data must be a JSON object", code=2)
    if not type_.strip() or not subject.strip():
        fail("--type and --subject must not be empty", code=2)
    config = settings("WARNING")

    async def go() -> None:
        found = endpoints(config)
        async with AsyncConnectionPool(
            found.database_url, min_size=1, max_size=2, kwargs={"autocommit": True}
        ) as pool:
            store = WaitStore(pool)
            logged, deliveries = await store.submit(type_, subject, payload, source=source)
            client = await connect(found.temporal_address, config.temporal_namespace)
            reached = await signal_deliveries(client, store, deliveries)
        console.print(
            f"input {logged.input_id} logged; delivered to {len(deliveries)} subscription(s), "
            f"{reached} run(s) signaled"
        )

    asyncio.run(go())
