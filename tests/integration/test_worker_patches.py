"""The worker's activity heartbeats and its payload passes, through a real dev server.

heartbeating() beats from loop timers: here an activity outlives its heartbeat timeout
three times over and still completes, where the same sleep without it times out. The
payload passes skip the serialization-context look-up only without a codec: with a codec that
reverses every payload's bytes, the server holds reversed payloads and the workflow encodes
an activity's input under the activity's context, as the SDK's own passes do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Sequence
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.converter import PayloadCodec, SerializationContext, WithSerializationContext
from temporalio.exceptions import ActivityError, TimeoutError, TimeoutType
from temporalio.worker import Worker

from activities._heartbeat import heartbeating
from workers.worker import sandbox_runner


@activity.defn(name="gw-test-sleep-heartbeating")
async def sleep_heartbeating(seconds: float) -> str:
    async with heartbeating():
        await asyncio.sleep(seconds)
    return f"slept {seconds}"


@activity.defn(name="gw-test-sleep-silent")
async def sleep_silent(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@workflow.defn(name="GwTestSleep", sandboxed=False)
class SleepWorkflow:
    @workflow.run
    async def run(self, name: str, seconds: float) -> str:
        result: str = await workflow.execute_activity(
            name,
            seconds,
            start_to_close_timeout=timedelta(seconds=30),
            heartbeat_timeout=timedelta(seconds=1),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
        return result


class Reverse(PayloadCodec, WithSerializationContext):
    """Reverses every payload's bytes and notes which context each encode ran under."""

    encoded: list[tuple[str, bytes]] = []

    def __init__(self, context: SerializationContext | None = None) -> None:
        self.context = context

    def with_context(self, context: SerializationContext) -> Reverse:
        return Reverse(context)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        Reverse.encoded.extend((type(self.context).__name__, p.data) for p in payloads)
        return [Payload(metadata=p.metadata, data=p.data[::-1]) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload(metadata=p.metadata, data=p.data[::-1]) for p in payloads]


async def _sleep(
    client: Client, task_queue: str, name: str, seconds: float, workflow_id: str = ""
) -> str:
    async with Worker(
        client, task_queue=task_queue, workflows=[SleepWorkflow],
        activities=[sleep_heartbeating, sleep_silent], workflow_runner=sandbox_runner(),
    ):  # fmt: skip
        result: str = await client.execute_workflow(
            SleepWorkflow.run, args=[name, seconds], id=workflow_id or f"gw-sleep-{uuid.uuid4()}",
            task_queue=task_queue,
        )  # fmt: skip
        return result


async def test_a_heartbeating_activity_outlives_its_heartbeat_timeout(
    client: Client, task_queue: str
) -> None:
    assert await _sleep(client, task_queue, "gw-test-sleep-heartbeating", 3.0) == "slept 3.0"


async def test_the_same_sleep_without_heartbeats_times_out(client: Client, task_queue: str) -> None:
    with pytest.raises(WorkflowFailureError) as failed:
        await _sleep(client, task_queue, "gw-test-sleep-silent", 3.0)
    cause = failed.value.cause
    assert isinstance(cause, ActivityError)
    assert isinstance(cause.cause, TimeoutError)
    assert cause.cause.type is TimeoutType.HEARTBEAT


async def test_a_worker_with_a_payload_codec_encodes_each_payload_under_its_context(
    client: Client, task_queue: str
) -> None:
    config = client.config()
    config["data_converter"] = dataclasses.replace(
        config["data_converter"], payload_codec=Reverse()
    )
    coded = Client(**config)
    workflow_id = f"gw-sleep-coded-{uuid.uuid4()}"
    result = await _sleep(coded, task_queue, "gw-test-sleep-heartbeating", 0.1, workflow_id)
    assert result == "slept 0.1"
    # What the server holds is the codec's output: the activity's input, reversed.
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    scheduled = next(
        e for e in history.events if e.HasField("activity_task_scheduled_event_attributes")
    )
    raw = scheduled.activity_task_scheduled_event_attributes.input.payloads[0].data
    assert raw == b"1.0"  # "0.1" reversed
    # The workflow encoded the activity's input under the activity's own context, as the
    # SDK does whenever a codec is configured.
    assert ("ActivitySerializationContext", b"0.1") in Reverse.encoded
