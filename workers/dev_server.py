"""The flags Groundwork's embedded stack and its tests give Temporal's dev server."""

from __future__ import annotations

from contracts.search_attributes import dev_server_args

# The dev server (one history shard) drains its transfer queue at most 20 times a second by
# default, so every workflow and activity task waits for the next 50 ms slot: an agent run of
# eight workflow-task steps spends about 400 ms on that clock alone. 1000/s takes the clock out
# of a run's latency; the idle server's CPU is the same either way (bench/RESULTS.md 2026-12-06).
# A production cluster has its own config; this applies only to the server we start.
TRANSFER_POLL_RPS = 1000


def dispatch_args() -> list[str]:
    """Dynamic config lifting the dev server's 50 ms task-dispatch grid."""
    return ["--dynamic-config-value", f"history.transferProcessorMaxPollRPS={TRANSFER_POLL_RPS}"]


def embedded_dev_server_args() -> list[str]:
    """Search attributes and dispatch rate: what `groundwork up` and the test suite start with."""
    return [*dev_server_args(), *dispatch_args()]
