"""`groundwork approval list`, `groundwork approve`, `groundwork reject`: signed decisions."""

from __future__ import annotations

import asyncio
import json

import typer
from psycopg_pool import AsyncConnectionPool
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from adapters.approvals import ApprovalStore
from cli._common import console, endpoints, fail, make_table, settings
from contracts.approvals import ApprovalRequest, DecisionResult, Verdict, signed_decision
from contracts.run import RunState, workflow_id_for
from workers.client import connect, update_refusal
from workers.settings import Settings

approval_app = typer.Typer(no_args_is_help=True, help="Approval requests.")


@approval_app.command("list")
def list_approvals(
    run: str | None = typer.Option(None, "--run", help="Only this run's approvals."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Approval requests, newest first, with who decided what and when."""
    config = settings("WARNING")

    async def go() -> list[ApprovalRequest]:
        found = endpoints(config)
        async with AsyncConnectionPool(
            found.database_url, min_size=1, max_size=1, kwargs={"autocommit": True}
        ) as pool:
            return await ApprovalStore(pool).list_approvals(run_id=run)

    rows = asyncio.run(go())
    if as_json:
        console.print_json(json.dumps([r.model_dump(mode="json") for r in rows]))
        return
    table = make_table(
        "approval",
        "status",
        "run",
        "subject",
        "rev",
        "destination",
        "scope",
        "decided by",
        "expires",
    )
    for r in rows:
        table.add_row(r.approval_id, r.status.value, r.run_id, r.subject, r.revision, r.destination, r.scope,
                      r.decided_by or "-", f"{r.expires_at:%Y-%m-%d %H:%M}")  # fmt: skip
    console.print(table)


def _decide(config: Settings, run_id: str, approval_id: str | None, verdict: Verdict, reason: str,
            principal: str | None, yes: bool) -> None:  # fmt: skip
    who = principal or config.principal
    if not who:
        fail("say who decides: --as PRINCIPAL or GROUNDWORK_PRINCIPAL", code=2)
    approver = config.approvers.get(who)
    if approver is None:
        fail(f"no secret for approver {who!r} in GROUNDWORK_APPROVERS", code=2)

    async def go() -> None:
        found = endpoints(config)
        client = await connect(found.temporal_address, config.temporal_namespace)
        handle = client.get_workflow_handle(workflow_id_for(run_id))
        try:
            state: RunState = await handle.query("get_state", result_type=RunState)
        except RPCError as err:
            fail(f"cannot read run {run_id!r}: {err.message}")
        pending = state.pending_approval
        if pending is None:
            fail(f"run {run_id} has no pending approval (status {state.status.value})")
        if approval_id is not None and approval_id != pending.approval_id:
            fail(f"approval {approval_id} is not pending; the pending one is {pending.approval_id}")
        table = make_table(title=f"{verdict.value} {pending.approval_id}", title_justify="left")
        for name in (
            "subject",
            "revision",
            "content_hash",
            "destination",
            "scope",
            "effect_key",
            "expires_at",
        ):
            table.add_row(name, str(getattr(pending, name)))
        console.print(table)
        if pending.preview:
            console.rule("preview")
            console.print(pending.preview, markup=False, highlight=False)
            console.rule()
        if not yes and not typer.confirm(f"{verdict.value} exactly this as {who}?"):
            fail("nothing sent")
        decision = signed_decision(
            pending, verdict, who, approver.secret.get_secret_value(), reason
        )
        try:
            result = await handle.execute_update(
                "decide_approval", decision, result_type=DecisionResult
            )
        except WorkflowUpdateFailedError as err:
            fail(f"refused: {update_refusal(err)}")
        if not result.accepted:
            fail(f"refused: {result.message}")
        console.print(f"{result.message}")

    asyncio.run(go())


def approve(
    run_id: str = typer.Argument(...),
    approval: str | None = typer.Option(
        None, "--approval", help="Check that this is the pending approval."
    ),
    principal: str | None = typer.Option(
        None, "--as", help="Approver (default GROUNDWORK_PRINCIPAL)."
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
) -> None:
    """Approve exactly the pending request: shows subject, revision, hash, destination, preview."""
    _decide(settings("WARNING"), run_id, approval, Verdict.APPROVE, "", principal, yes)


def reject(
    run_id: str = typer.Argument(...),
    reason: str = typer.Option(..., "--reason", help="Why; the agent sees it."),
    approval: str | None = typer.Option(None, "--approval"),
    principal: str | None = typer.Option(None, "--as"),
    yes: bool = typer.Option(True, "--yes/--confirm"),
) -> None:
    """Reject the pending request; nothing is done and the model is told why."""
    _decide(settings("WARNING"), run_id, approval, Verdict.REJECT, reason, principal, yes)
