"""The workflow of bench/effects.py's overhead figure (a module of its own: the workflow
sandbox re-imports a workflow's module, and this one must stay free of I/O imports).

Per pair it runs, one after the other and in alternating order, (a) the real
`groundwork.effect_dispatch` activity with a PreparedCall made by `contracts.prepare.prepare`
(effect class idempotent_write, target "notes", a fresh effect key) and (b) the bench's plain
activity, which POSTs the same request (same builder output, same request hash, its own fresh
key) to the same HTTP target with `HttpTarget.execute` and nothing else. Both get the same
activity options as a run's dispatch (timeouts, heartbeat timeout, retry policy).

It returns the workflow-side span of each activity: `workflow.now()` just before scheduling
it minus `workflow.now()` just after its result arrived, i.e. from the start of the workflow
task that scheduled it to the start of the workflow task that received its result.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy

from contracts.effects import (
    EFFECT_DISPATCH_ACTIVITY,
    EffectDispatchInput,
    EffectOutcome,
    EffectStatus,
    PreparedCall,
)
from contracts.prepare import prepare, request_hash
from contracts.run import EffectClass, ToolPolicy

PLAIN_ACTIVITY = "bench.plain_http_write"
OVERHEAD_WORKFLOW = "BenchEffectOverhead"
MAX_ATTEMPTS = 6  # as workflows._effects.EFFECT_MAX_ATTEMPTS (the target's attempts)
AGENT = "notes-writer"
TOOL = "publish_note"
TARGET = "notes"


class PlainWriteInput(BaseModel):
    effect_key: str
    request_hash: str
    payload: dict[str, Any]


class PlainWriteResult(BaseModel):
    external_ref: str
    created: bool


class OverheadInput(BaseModel):
    tag: str
    pairs: int
    first_pair: int = 0


class PairSpan(BaseModel):
    pair: int
    ledger_first: bool
    ledger_activity_id: str
    plain_activity_id: str
    ledger_ms: float
    plain_ms: float
    ledger_replayed: bool


def _options() -> dict[str, Any]:
    """What AgentRunWorkflow._dispatch_until_settled passes (default ActivityTimeouts)."""
    return {
        "start_to_close_timeout": timedelta(seconds=120),
        "heartbeat_timeout": timedelta(seconds=20),
        "retry_policy": RetryPolicy(
            initial_interval=timedelta(seconds=1),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=20),
            maximum_attempts=0,  # as _effect_retry: a dispatch retries until it has a verdict
        ),
    }


def note_payload(arguments: dict[str, Any]) -> dict[str, Any]:
    """publish_note's builder output (definitions/notes_writer.py), without importing agents."""
    note_id, revision = arguments["note_id"], arguments["revision"]
    return {
        "path": f"notes/{note_id}.md",
        "content": arguments["content"],
        "message": arguments.get("title") or f"Publish {note_id} r{revision}",
    }


@workflow.defn(name=OVERHEAD_WORKFLOW)
class EffectOverheadWorkflow:
    @workflow.run
    async def run(self, inp: OverheadInput) -> list[PairSpan]:
        spans: list[PairSpan] = []
        info = workflow.info()
        for n in range(inp.first_pair, inp.first_pair + inp.pairs):
            arguments = {
                "note_id": f"{inp.tag}-{n}",
                "revision": n + 1,
                "content": f"# {inp.tag} note {n}\n\nrevision {n + 1}, benchmark text.\n",
            }
            key = f"note-{inp.tag}-{n}:r{n + 1}:ledger:notes"
            decision = prepare(
                run_id=info.workflow_id,
                agent_name=AGENT,
                owner_agent=AGENT,
                tool_name=TOOL,
                call_id=f"call-{n}",
                arguments=arguments,
                policy=ToolPolicy(effect_class=EffectClass.IDEMPOTENT_WRITE),
                target=TARGET,
                effect_key=key,
                domain_event="NotePublished",
                now=workflow.now(),
            )
            assert isinstance(decision, PreparedCall)
            plain = PlainWriteInput(
                effect_key=f"note-{inp.tag}-{n}:r{n + 1}:plain:notes",
                request_hash=request_hash(TOOL, TARGET, arguments),
                payload=note_payload(arguments),
            )
            ledger_first = n % 2 == 0
            ledger_id = plain_id = ""
            ledger_ms = plain_ms = 0.0
            replayed = False
            for which in ("ledger", "plain") if ledger_first else ("plain", "ledger"):
                t0 = workflow.now()
                if which == "ledger":
                    outcome = await workflow.execute_activity(
                        EFFECT_DISPATCH_ACTIVITY,
                        EffectDispatchInput(call=decision, max_attempts=MAX_ATTEMPTS),
                        result_type=EffectOutcome,
                        activity_id=f"ledger-{n}",
                        **_options(),
                    )
                    ledger_id = f"ledger-{n}"
                    ledger_ms = (workflow.now() - t0).total_seconds() * 1000
                    if outcome.status is not EffectStatus.SUCCEEDED:
                        raise RuntimeError(f"dispatch ended {outcome.status}: {outcome.message}")
                    replayed = outcome.replayed
                else:
                    await workflow.execute_activity(
                        PLAIN_ACTIVITY,
                        plain,
                        result_type=PlainWriteResult,
                        activity_id=f"plain-{n}",
                        **_options(),
                    )
                    plain_id = f"plain-{n}"
                    plain_ms = (workflow.now() - t0).total_seconds() * 1000
            spans.append(
                PairSpan(
                    pair=n,
                    ledger_first=ledger_first,
                    ledger_activity_id=ledger_id,
                    plain_activity_id=plain_id,
                    ledger_ms=ledger_ms,
                    plain_ms=plain_ms,
                    ledger_replayed=replayed,
                )
            )
        return spans
