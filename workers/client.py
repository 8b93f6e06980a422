"""The Temporal client every Groundwork process uses: pydantic payloads, our namespace."""

from __future__ import annotations

from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError


async def connect(address: str, namespace: str = "default") -> Client:
    return await Client.connect(
        address, namespace=namespace, data_converter=pydantic_data_converter
    )


def update_refusal(err: WorkflowUpdateFailedError) -> str:
    """Why a run refused an update, as a person reads it: the validator's own message,
    without the exception type the SDK puts in front of it."""
    cause = err.cause
    return cause.message if isinstance(cause, ApplicationError) else str(cause)
