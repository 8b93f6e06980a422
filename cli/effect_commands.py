"""`groundwork effect list | show | resolve`: the ledger as a user reads and answers it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import typer
from psycopg_pool import AsyncConnectionPool
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from adapters.ledger import EffectLedger
from cli._common import console, endpoints, fail, make_table, settings
from contracts.effects import (
    EffectResolution,
    EffectResolutionResult,
    EffectStatus,
    ResolveEffectInput,
    answer_after_run_ended,
    recorded_answer,
)
from contracts.run import workflow_id_for
from workers.client import connect, update_refusal

effect_app = typer.Typer(no_args_is_help=True, help="Effects in the ledger.")

_STYLE = {
    EffectStatus.SUCCEEDED: "green",
    EffectStatus.REQUIRES_HUMAN: "red",
    EffectStatus.CONFLICT: "red",
    EffectStatus.FAILED: "red",
    EffectStatus.UNKNOWN: "yellow",
    EffectStatus.DISPATCHING: "yellow",
}


@asynccontextmanager
async def _ledger() -> AsyncIterator[EffectLedger]:
    found = endpoints(settings("WARNING"))
    pool = AsyncConnectionPool(
        found.database_url, min_size=1, max_size=2, open=False, kwargs={"autocommit": True}
    )
    try:
        await pool.open(wait=True, timeout=10)
    except Exception as err:
        fail(f"cannot reach the ledger database: {err}")
    try:
        yield EffectLedger(pool)
    finally:
        await pool.close()


@effect_app.command("list")
def list_effects(
    run: str | None = typer.Option(None, "--run", help="Only effects of this run id."),
    status: EffectStatus | None = typer.Option(
        None, "--status", help="Only effects in this status."
    ),
    limit: int = typer.Option(100, "--limit", min=1, max=10_000),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List effects, newest first."""

    async def go() -> None:
        async with _ledger() as ledger:
            records = await ledger.list_effects(run_id=run, status=status, limit=limit)
        if as_json:
            console.print_json(
                json.dumps(
                    [r.model_dump(mode="json", exclude={"request", "receipt"}) for r in records]
                )
            )
            return
        listing = make_table(
            "effect key", "status", "tool", "target", "attempt", "external ref", "run", "updated"
        )
        for r in records:
            style = _STYLE.get(r.status, "")
            listing.add_row(
                r.effect_key, f"[{style}]{r.status.value}[/{style}]" if style else r.status.value,
                r.tool_name, r.target, str(r.attempt), r.external_ref or "-", r.run_id,
                f"{r.updated_at:%Y-%m-%d %H:%M:%S}",
            )  # fmt: skip
        console.print(listing)

    asyncio.run(go())


@effect_app.command("show")
def show(
    effect_key: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")
) -> None:
    """One effect: its row, every attempt, and its request and receipt."""

    async def go() -> None:
        async with _ledger() as ledger:
            record = await ledger.get(effect_key)
            if record is None:
                fail(f"no effect {effect_key!r}")
            attempts = await ledger.attempts(effect_key)
        if as_json:
            body = record.model_dump(mode="json") | {
                "attempts": [a.model_dump(mode="json") for a in attempts]
            }
            console.print_json(json.dumps(body))
            return
        row = make_table(title=f"effect {effect_key}", title_justify="left")
        for name in ("status", "run_id", "tool_name", "target", "effect_class", "attempt", "fence",
                     "external_ref", "request_hash", "last_error", "created_at", "updated_at"):  # fmt: skip
            value = getattr(record, name)
            row.add_row(name, str(value.value if hasattr(value, "value") else value))
        row.add_row("request", json.dumps(record.request))
        row.add_row("receipt", json.dumps(record.receipt))
        console.print(row)
        log = make_table(
            "attempt", "fence", "activity attempt", "phase", "outcome", "at", title="attempts"
        )
        for a in attempts:
            log.add_row(
                str(a.attempt),
                str(a.fence),
                str(a.activity_attempt or "-"),
                a.phase,
                a.outcome or "-",
                f"{a.at:%H:%M:%S.%f}",
            )
        console.print(log)

    asyncio.run(go())


async def _after_run_ended(run_id: str, answer: ResolveEffectInput) -> EffectResolutionResult:
    """The run is gone (ended, or never was): the ledger says whether this answer is the
    one already recorded, as a retry after a lost response would find; nothing is written."""
    async with _ledger() as ledger:
        record = await ledger.get(answer.effect_key)
        attempts = await ledger.attempts(answer.effect_key) if record else []
    verdict = answer_after_run_ended(run_id, answer, record, recorded_answer(attempts))
    if isinstance(verdict, str):
        fail(f"refused: {verdict}")
    return verdict


@effect_app.command("resolve")
def resolve(
    run_id: str = typer.Argument(..., help="The run waiting on the effect."),
    effect_key: str = typer.Argument(...),
    committed: bool = typer.Option(False, "--committed", help="It happened at the target."),
    not_committed: bool = typer.Option(
        False, "--not-committed", help="It did not; dispatch may proceed."
    ),
    abandon: bool = typer.Option(False, "--abandon", help="Give up on this effect."),
    ref: str | None = typer.Option(
        None, "--ref", help="External ref at the target (with --committed)."
    ),
    principal: str = typer.Option("cli", "--as", help="Who resolves it (recorded in the ledger)."),
    note: str = typer.Option("", "--note"),
) -> None:
    """Answer an effect in requires_human; returns once the run's ledger has recorded it.

    Sent as the run's `decide_effect` update: a run not waiting on this effect refuses it
    and nothing changes.
    """
    chosen = [
        name
        for name, on in (
            ("committed", committed),
            ("not_committed", not_committed),
            ("abandon", abandon),
        )
        if on
    ]
    if len(chosen) != 1:
        fail("choose exactly one of --committed, --not-committed, --abandon", code=2)
    if committed and not ref:
        fail("--committed needs --ref: where the effect is at the target", code=2)
    config = settings("WARNING")
    answer = ResolveEffectInput(
        effect_key=effect_key, resolution=EffectResolution(chosen[0]), external_ref=ref,
        principal=principal, note=note,
    )  # fmt: skip

    async def go() -> None:
        found = endpoints(config)
        client = await connect(found.temporal_address, config.temporal_namespace)
        handle = client.get_workflow_handle(workflow_id_for(run_id))
        try:
            result = await handle.execute_update(
                "decide_effect", answer, result_type=EffectResolutionResult
            )
        except WorkflowUpdateFailedError as err:
            fail(f"refused: {update_refusal(err)}")
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                fail(f"cannot reach run {run_id!r}: {err.message}")
            try:  # an update finds no workflow both when it has closed and when there is none
                await handle.describe()
            except RPCError as missing:
                fail(f"no run {run_id!r}: {missing.message}")
            result = await _after_run_ended(run_id, answer)
        console.print(result.message)

    asyncio.run(go())
