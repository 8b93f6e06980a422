"""Workflow payload passes that skip the serialization-context look-up nothing would use.

For every workflow task the SDK walks the activation three times to decode and the
completion three times to encode (codec, external storage, storage references). For each
payload sequence it first asks the workflow, inside its sandbox, which serialization
context the payload belongs to, then hands the payloads to a data converter carrying that
context. With neither a payload codec nor external storage configured (this worker's case)
each pass returns the payloads as they came, whatever the context, so the look-up is pure
cost: ~6 % of the worker's CPU under bench/effects.py's e2e load (py-spy, bench/RESULTS.md).

install() wraps temporalio's command-aware converter so that, when it has no codec and no
external storage, each pass runs the plain DataConverter's own method on it: what the
context-specific converter would have run, since a context never adds a codec or storage
(DataConverter.with_context keeps a None component None). The checks those methods make
(an externally stored payload arriving where no storage is configured is still TMPRL1105)
are unchanged. With a codec or storage configured, the SDK's path runs as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter
from temporalio.worker import _workflow

# The six passes of temporalio.bridge.worker.decode_activation / encode_completion.
PASSES = (
    "_decode_reference_payload_sequence",
    "_external_retrieve_payload_sequence",
    "_decode_payload_sequence",
    "_encode_payload_sequence",
    "_external_store_payload_sequence",
    "_encode_reference_payload_sequence",
)

_Pass = Callable[[Any, Sequence[Payload]], Awaitable[list[Payload]]]


def _context_free_when_unused(contextual: _Pass, plain: _Pass) -> _Pass:
    async def run_pass(self: Any, payloads: Sequence[Payload]) -> list[Payload]:
        if self.payload_codec is None and self.external_storage is None:
            return await plain(self, payloads)
        return await contextual(self, payloads)

    run_pass.__name__ = getattr(contextual, "__name__", "run_pass")
    run_pass.__wrapped__ = contextual  # type: ignore[attr-defined]
    return run_pass


def install() -> None:
    """Idempotent. temporalio is pinned in pyproject.toml; tests/unit/test_payload_context.py
    fails if the converter's passes are no longer these six."""
    cls: Any = _workflow._CommandAwareDataConverter
    for name in PASSES:
        current = cls.__dict__[name]
        if getattr(current, "__wrapped__", None) is not None:
            continue
        setattr(cls, name, _context_free_when_unused(current, getattr(DataConverter, name)))
