"""Deliveries reach runs as `deliver_input` signals. The sender marks each one signaled; the
worker's relay re-sends any left unsignaled (the sender died between commit and signal)."""

from __future__ import annotations

import asyncio

import structlog
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from adapters.waits import WaitStore
from contracts.run import workflow_id_for
from contracts.waits import Delivery

log = structlog.get_logger(__name__)


async def signal_deliveries(client: Client, store: WaitStore, deliveries: list[Delivery]) -> int:
    """Signal each delivery's run; returns how many reached a running run."""
    sent: list[Delivery] = []
    reached = 0
    for delivery in deliveries:
        handle = client.get_workflow_handle(workflow_id_for(delivery.run_id))
        try:
            await handle.signal("deliver_input", delivery)
            reached += 1
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                log.warning("delivery_signal_failed", run_id=delivery.run_id, error=err.message)
                continue  # left unsignaled: the relay tries again
            log.info(
                "delivery_run_closed",
                run_id=delivery.run_id,
                subscription_id=delivery.subscription_id,
            )
        sent.append(delivery)
    await store.mark_signaled(sent)
    return reached


async def relay_forever(
    client: Client, store: WaitStore, interval_s: float = 1.0, grace_s: float = 2.0
) -> None:
    while True:
        try:
            pending = await store.unsignaled(older_than_s=grace_s)
            if pending:
                reached = await signal_deliveries(client, store, pending)
                log.info("deliveries_relayed", pending=len(pending), reached=reached)
        except Exception as err:  # keep relaying: one bad round must not stop the loop
            log.warning("relay_round_failed", error=str(err))
        await asyncio.sleep(interval_s)
