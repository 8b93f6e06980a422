"""A run's carry-over survives Temporal's payload converter whole: what makes repeated
approvals, resolutions and deliveries idempotent must not change shape between executions."""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio.contrib.pydantic import pydantic_data_converter

from contracts.approvals import ApprovalStatus, Verdict
from contracts.continuation import RESUMED_MARKER, RunCarryOver, resumed_marker
from contracts.effects import EffectRecord, EffectResolution, EffectStatus, ResolveEffectInput
from contracts.run import EffectClass, RunSpec, RunState
from contracts.session import SteerInput
from contracts.status import RunStatus
from contracts.waits import Delivery, LoggedInput


def _carry() -> RunCarryOver:
    now = datetime(2026, 12, 4, 5, 0, tzinfo=UTC)
    resolution = ResolveEffectInput(
        effect_key="note-1:r1:abc:notes",
        resolution=EffectResolution.COMMITTED,
        external_ref="commit-9",
        principal="alice",
    )
    record = EffectRecord(
        effect_key=resolution.effect_key, run_id="r-1", tool_name="publish_note",
        target="notes", effect_class=EffectClass.WRITE, request_hash="h" * 64,
        status=EffectStatus.SUCCEEDED, attempt=2, fence=3, external_ref="commit-9",
        last_error=None, created_at=now, updated_at=now,
    )  # fmt: skip
    delivery = Delivery(
        subscription_id="sub-1",
        run_id="r-1",
        input=LoggedInput(input_id=7, type="pr.review", subject="acme/x#pr-1", logged_at=now),
    )
    return RunCarryOver(
        execution=3,
        state=RunState(run_id="r-1", agent="notes-writer", tenant="acme", status=RunStatus.RUNNING),
        agent="notes-writer",
        transcript_ref="t" * 64,
        pending_items=[{"type": "function_call_output", "call_id": "c1", "output": "ok"}],
        steers=[SteerInput(input_id="in-4", text="shorter, please", reply_to="session-acme-1")],
        steers_seen=["in-3", "in-4"],
        decided={"ap-1": Verdict.APPROVE},
        latest_revision={"note-1": "2"},
        ended={"ap-0": (ApprovalStatus.SUPERSEDED, "system", "revision 2 replaced it")},
        resolved={resolution.effect_key: (resolution, record)},
        delivered={"sub-1": {7: delivery}},
    )


def test_the_carry_over_round_trips_through_the_payload_converter() -> None:
    carry = _carry()
    spec = RunSpec.model_validate(
        {"run_id": "r-1", "release": {"agent": "notes-writer"}, "input": "go"}
    )
    converter = pydantic_data_converter.payload_converter
    payloads = converter.to_payloads([spec, carry])
    back_spec, back = converter.from_payloads(payloads, [RunSpec, RunCarryOver])
    assert back_spec == spec
    assert back == carry
    assert isinstance(next(iter(back.delivered["sub-1"])), int)
    assert back.ended["ap-0"][0] is ApprovalStatus.SUPERSEDED


def test_the_marker_names_the_transcript_it_stands_for() -> None:
    marker = resumed_marker("t" * 64)
    assert marker["role"] == "user"
    assert marker["content"] == f"[{RESUMED_MARKER} {'t' * 64}]"
