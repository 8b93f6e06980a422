"""The worker's payload passes: no context look-up without a codec, the SDK's path with one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    DataConverter,
    PayloadCodec,
    WorkflowSerializationContext,
)
from temporalio.converter._extstore import StorageDriverStoreContext
from temporalio.worker import _workflow

from workers import payload_context


class Workflow:
    """Stands in for the sandboxed workflow instance the converter asks for contexts."""

    def __init__(self) -> None:
        self.asked = 0

    def get_serialization_context(self, command_info: Any) -> Any:
        self.asked += 1
        return None

    def get_external_store_context(self, command_info: Any) -> StorageDriverStoreContext:
        self.asked += 1
        return StorageDriverStoreContext(target=None)


class Reverse(PayloadCodec):
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload(metadata=p.metadata, data=p.data[::-1]) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self.encode(payloads)


def converter(base: DataConverter, workflow: Workflow) -> Any:
    context = WorkflowSerializationContext(namespace="default", workflow_id="run-x")
    return _workflow._CommandAwareDataConverter.create(
        instance=workflow,  # type: ignore[arg-type]
        context_free_dc=base,
        workflow_context_dc=base.with_context(context),
        workflow_context=context,
    )


def test_the_sdk_still_has_exactly_these_passes() -> None:
    overridden = {
        name
        for name in vars(_workflow._CommandAwareDataConverter)
        if name.endswith("_payload_sequence")
    }
    assert overridden == set(payload_context.PASSES)


@pytest.mark.parametrize("name", payload_context.PASSES)
async def test_without_a_codec_a_pass_asks_the_workflow_nothing(name: str) -> None:
    payload_context.install()
    payload_context.install()  # idempotent: wrapped once
    workflow = Workflow()
    payloads = [Payload(metadata={"encoding": b"json/plain"}, data=b'{"a":1}')]
    dc = converter(DataConverter.default, workflow)
    out = await getattr(dc, name)(payloads)
    assert out == payloads
    assert workflow.asked == 0
    sdk_pass = vars(_workflow._CommandAwareDataConverter)[name].__wrapped__
    assert (await sdk_pass(dc, payloads)) == payloads
    assert workflow.asked >= 1  # what the SDK's own pass does: ask, then change nothing


async def test_an_externally_stored_payload_without_storage_is_still_refused() -> None:
    payload_context.install()
    from temporalio.converter import _data_converter, _extstore

    marked = Payload(metadata={"encoding": _extstore._REFERENCE_ENCODING}, data=b"{}")
    assert _data_converter._is_reference_payload(marked)
    with pytest.raises(RuntimeError, match="TMPRL1105"):
        await converter(DataConverter.default, Workflow())._external_retrieve_payload_sequence(
            [marked]
        )


async def test_with_a_codec_each_pass_takes_the_payloads_context() -> None:
    payload_context.install()
    workflow = Workflow()
    dc = converter(DataConverter(payload_codec=Reverse()), workflow)
    payloads = [Payload(metadata={"encoding": b"json/plain"}, data=b'{"a":1}')]
    encoded = await dc._encode_payload_sequence(payloads)
    assert encoded[0].data == b'}1:"a"{'
    assert workflow.asked == 1
    assert (await dc._decode_payload_sequence(encoded)) == payloads
    assert workflow.asked == 2
