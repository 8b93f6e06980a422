"""Runs last in the integration suite: no secret the suite used appears in any workflow
history the suite produced (payloads are checked as raw protobuf bytes, not base64)."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from tests.integration.test_approvals import APPROVERS

SECRETS = [entry["secret"] for entry in APPROVERS.values()] + ["test-key"]


async def test_no_secret_in_any_history(client: Client) -> None:
    scanned = signed = 0
    leaks: list[str] = []
    async for execution in client.list_workflows():
        history = await client.get_workflow_handle(
            execution.id, run_id=execution.run_id
        ).fetch_history()
        raw = b"".join(event.SerializeToString() for event in history.events)
        text = history.to_json()
        for secret in SECRETS:
            if secret.encode() in raw or secret in text:
                leaks.append(f"{execution.id}: {secret[:4]}…")
        scanned += 1
        signed += b'"signature"' in raw
    if not signed:
        pytest.skip(
            f"{scanned} histories, none with a signed decision: run it with the approval tests"
        )
    assert not leaks, leaks
