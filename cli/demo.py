"""`groundwork demo`: the flagship run (seed 000) on the embedded stack, end to end.

Research over five installed packages -> one sealed EvidenceBundle per tree -> EvidenceSet
-> an editor's draft -> an approval bound to its revision and hash -> publish to a git
docs site as an irreversible effect -> the verifier re-reads the tag.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path
from typing import Any

import typer
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError
from ulid import ULID

from adapters.source_trees import SourceTreeError, package_root, pin_git
from cli._common import console, fail, make_table, settings
from cli.progress import describe_event
from cli.stack_commands import ensure_stack
from contracts.approvals import ApprovalRequest, DecisionResult, Verdict, signed_decision
from contracts.research import ResearchSpec, ResearchState, SourceTree
from contracts.run import RunResult
from workers.client import connect
from workers.research_client import DEFAULT_PACKAGES, start_research
from workers.settings import Settings

DEMO_QUESTION = (
    "How do temporalio, openai-agents, psycopg, pydantic and structlog name and organise "
    "their error, exception and retry types? Cite file:line."
)


def demo(
    yes: bool = typer.Option(
        False, "--yes", "-y", help="Approve the draft (signed, as the local editor) when asked."
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        help="Model route for branches and editor, e.g. openai:gpt-4.1-mini (OPENAI_API_KEY).",
    ),
    packages: str = typer.Option(
        ",".join(DEFAULT_PACKAGES), "--packages", help="Installed packages to research."
    ),
    git: list[Path] = typer.Option(
        [], "--git", help="A local git repository to research too (its HEAD); repeatable."
    ),
    branch_timeout_s: float = typer.Option(300.0, "--branch-timeout-s"),
) -> None:
    """Research -> evidence -> draft -> approval -> publish -> verify, on real installed source."""
    config = settings("WARNING")
    names = [p.strip() for p in packages.split(",") if p.strip()]
    try:  # bad input gets one line before anything starts
        for name in names:
            package_root(name)
        for path in git:
            pin_git(str(path), "HEAD")
    except SourceTreeError as err:
        fail(str(err), code=2)
    with console.status("starting the embedded stack (Temporal, Postgres, worker, trigger)…"):
        state = ensure_stack(config)
    config = settings("WARNING")  # `up` writes the local docs site and editor on first start
    try:
        spec = ResearchSpec(
            run_id=str(ULID()),
            question=DEMO_QUESTION,
            sources=[SourceTree(repo_id=n.replace("_", "-"), package=n) for n in names]
            + [SourceTree(repo_id=_repo_id(p), git_path=str(p.resolve())) for p in git],
            branch_timeout_s=branch_timeout_s,
            principal=config.principal or "local-user",
            **({"branch_route": model, "editor_route": model} if model else {}),
        )
    except ValueError as err:
        fail(f"invalid demo input: {err}".replace("\n", " "), code=2)

    async def go() -> bool:
        client = await connect(state.temporal_address, config.temporal_namespace)
        handle = await start_research(client, spec, config.task_queue)
        console.print(f"[bold]research run {spec.run_id}[/bold]", highlight=False)
        console.print(f"question: {spec.question}", highlight=False)
        console.print(f"Web UI: {config.run_url(handle.id)}", highlight=False, soft_wrap=True)
        return await _follow(handle, spec, config, yes)

    try:
        ok = asyncio.run(go())
    except KeyboardInterrupt:
        console.print(
            f"\nstopped following; the run goes on durably: groundwork run show {spec.run_id}"
        )
        raise typer.Exit(130) from None
    console.print(
        "The stack keeps running so the run stays visible in the Web UI; "
        "[bold]groundwork down[/bold] stops it."
    )
    if not ok:
        fail("the research run did not publish a verified article")


async def _follow(
    handle: WorkflowHandle[Any, RunResult], spec: ResearchSpec, config: Settings, yes: bool
) -> bool:
    seen = 0
    asked: set[str] = set()
    branches: dict[str, str] = {}
    result_task = asyncio.ensure_future(handle.result())
    while not result_task.done():
        try:
            current: ResearchState | None = await handle.query(
                "get_state", result_type=ResearchState
            )
        except RPCError:
            current = None  # no worker has taken the run yet
        if current is not None:
            for event in current.last_events:
                if event.seq > seen:
                    seen = event.seq
                    line = _describe(event.type, event.data) or describe_event(event)
                    console.print(line, highlight=False, markup=False)
            for repo_id, branch in current.branches.items():
                label = f"{branch.status.value}" + (
                    f", {branch.findings} findings" if branch.findings else ""
                )
                if branches.get(repo_id) != label:
                    branches[repo_id] = label
                    console.print(
                        f"  branch {repo_id:<12} {label:<22} {branch.source_revision}",
                        highlight=False,
                    )
            pending = current.pending_approval
            if pending is not None and pending.approval_id not in asked:
                asked.add(pending.approval_id)
                _show_request(pending, spec.run_id)
                if yes:
                    await _approve(handle, pending, config)
        await asyncio.sleep(0.25)
    try:
        result = result_task.result()
    except WorkflowFailureError as err:
        console.print(f"[red]run failed:[/red] {err.cause}", highlight=False)
        return False
    final: ResearchState = await handle.query("get_state", result_type=ResearchState)
    return _show_outcome(result, final, config)


def _repo_id(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]+", "-", path.resolve().name)[:64] or "repo"


def _describe(kind: str, data: dict[str, Any]) -> str | None:
    match kind:
        case "SourcesPinned":
            return f"pinned {len(data.get('sources') or {})} source trees"
        case "EvidenceSetClosed":
            missing = data.get("missing") or []
            without = f", closed without {', '.join(missing)}" if missing else ""
            return (
                f"EvidenceSet v{data.get('version')} closed: {len(data.get('repos') or [])} "
                f"bundles, manifest {str(data.get('manifest_hash'))[:16]}{without}"
            )
        case "DraftCreated":
            return (
                f"draft r{data.get('revision')} written from evidence set "
                f"v{data.get('evidence_set_version')}: {data.get('claims')} cited claims, "
                f"content {str(data.get('content_hash'))[:16]}"
            )
        case "EvidenceBundleAccepted" | "BranchFailed" | "BranchTimedOut" | "EvidenceConflict":
            return f"{kind}: {data.get('repo_id')} {data.get('message') or data.get('reason') or ''}".rstrip()
        case "EffectPrepared":
            return f"publish prepared: {data.get('effect_key')}"
        case "EffectSettled":
            again = (
                " (this exact revision and content was already published: nothing was sent)"
                if data.get("replayed")
                else ""
            )
            return f"publish {data.get('status')}: {data.get('external_ref')}{again}"
        case "ClaimVerified" | "ClaimUnverified":
            return f"{kind}: {data.get('message')}"
    return None


def _show_request(pending: ApprovalRequest, run_id: str) -> None:
    table = make_table(title=f"approval requested {pending.approval_id}")
    for name in ("subject", "revision", "content_hash", "destination", "scope", "effect_key"):
        table.add_row(name, str(getattr(pending, name)))
    console.print(table)
    console.rule("preview")
    console.print(pending.preview, markup=False, highlight=False)
    console.rule()
    console.print(
        f"approve exactly this from another terminal:  [bold].venv/bin/groundwork approve {run_id}[/bold]"
        f"   (or reject: groundwork reject {run_id} --reason TEXT)",
        highlight=False,
    )


async def _approve(
    handle: WorkflowHandle[Any, RunResult], pending: ApprovalRequest, config: Settings
) -> None:
    """The same signed decision `groundwork approve` sends, as the configured principal."""
    who = config.principal
    approver = config.approvers.get(who) if who else None
    if who is None or approver is None:
        console.print("[yellow]--yes: no local approver configured; approve by hand[/yellow]")
        return
    decision = signed_decision(pending, Verdict.APPROVE, who, approver.secret.get_secret_value())
    answer: DecisionResult = await handle.execute_update(
        "decide_approval", decision, result_type=DecisionResult
    )
    console.print(f"--yes: {answer.message}", highlight=False)


def _show_outcome(result: RunResult, final: ResearchState, config: Settings) -> bool:
    verification = final.verification
    if verification is None or not verification.verified:
        console.print(f"[red]not verified[/red]: {result.failure_message}", highlight=False)
        return False
    target = config.targets.get("docs-site")
    console.rule(f"published {verification.path} at {verification.tag}")
    if target is not None and target.path is not None and verification.commit:
        shown = subprocess.run(
            ["git", "-C", str(target.path), "show", f"{verification.commit}:{verification.path}"],
            capture_output=True,
            text=True,
        )
        console.print(shown.stdout, markup=False, highlight=False)
        console.print(f"docs site: {target.path}", highlight=False)
    console.rule()
    console.print(f"tag:          {verification.tag}", highlight=False)
    console.print(f"commit:       {verification.commit}", highlight=False)
    console.print(f"verification: {verification.message}", highlight=False)
    console.print(f"Web UI:       {config.run_url('run-' + result.run_id)}", highlight=False)
    return True
