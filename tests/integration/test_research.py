"""The seed 000 story on the real stack: research -> evidence -> draft -> approval -> publish."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from pathlib import Path
from typing import Any

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client, WorkflowHandle

from contracts.approvals import ApprovalDecision, DecisionResult, Verdict, sign
from contracts.research import (
    ResearchSpec,
    ResearchState,
    SourceTree,
)
from contracts.run import RunResult
from contracts.status import RunStatus
from tests.helpers import running_worker
from workers.research_client import start_research

SECRET = "s3cret-for-tests"
APPROVERS = {"erin": {"secret": SECRET, "roles": ["editor"]}}


def docs_site(tmp_path: Path) -> dict[str, Any]:
    return {"docs-site": {"kind": "git", "path": str(tmp_path / f"docs-{uuid.uuid4().hex[:6]}")}}


def research_spec(**extra: Any) -> ResearchSpec:
    values: dict[str, Any] = {
        "run_id": f"r-{uuid.uuid4().hex[:10]}",
        "question": "How do these libraries name their error and retry types?",
        "sources": [
            SourceTree(repo_id=p, package=p) for p in ("temporalio", "psycopg", "structlog")
        ],
    }
    values.update(extra)
    return ResearchSpec(**values)


async def state_of(handle: WorkflowHandle[Any, RunResult]) -> ResearchState:
    result: ResearchState = await handle.query("get_state", result_type=ResearchState)
    return result


async def wait_for(
    handle: WorkflowHandle[Any, RunResult], check: Any, within: float = 60
) -> ResearchState:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        try:
            state = await state_of(handle)
            if check(state):
                return state
        except Exception:  # not picked up yet
            pass
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not reached; last events: {state.last_events[-5:]}")
        await asyncio.sleep(0.2)


def decision_for(
    state: ResearchState, verdict: Verdict = Verdict.APPROVE, **override: str
) -> ApprovalDecision:
    pending = state.pending_approval
    assert pending is not None
    fields = dict(
        approval_id=pending.approval_id, verdict=verdict, principal="erin", subject=pending.subject,
        revision=pending.revision, content_hash=pending.content_hash,
        destination=pending.destination, scope=pending.scope,
    )  # fmt: skip
    fields.update(override)
    unsigned = ApprovalDecision(**fields)  # type: ignore[arg-type]
    return unsigned.model_copy(update={"signature": sign(unsigned, SECRET)})


async def decide(
    handle: WorkflowHandle[Any, RunResult], decision: ApprovalDecision
) -> DecisionResult:
    result: DecisionResult = await handle.execute_update(
        "decide_approval", decision, result_type=DecisionResult
    )
    return result


def tags(repo: str) -> list[str]:
    out = subprocess.run(
        ["git", "-C", repo, "tag", "-l"], capture_output=True, text=True, check=True
    )
    return [t for t in out.stdout.split() if t]


async def count_events(database_url: str, run_id: str, kind: str) -> int:
    async with (
        AsyncConnectionPool(database_url, min_size=1, max_size=1, open=False) as pool,
        pool.connection() as conn,
    ):
        cur = await conn.execute(
            "SELECT count(*) FROM run_events WHERE run_id = %s AND type = %s", (run_id, kind)
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_flagship_publishes_one_verified_article(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path
) -> None:
    targets = docs_site(tmp_path)
    async with running_worker(
        client, task_queue, migrated_database, targets=targets, approvers=APPROVERS
    ):
        spec = research_spec()
        handle = await start_research(client, spec, task_queue)
        state = await wait_for(handle, lambda s: s.pending_approval is not None)
        assert {b.status.value for b in state.branches.values()} == {"sealed"}
        assert len(state.evidence_sets) == 1
        assert not state.evidence_sets[0].missing
        assert state.pending_approval is not None
        assert state.pending_approval.revision == "1"
        assert "[E1]" in state.pending_approval.preview
        answer = await decide(handle, decision_for(state))
        assert answer.accepted, answer.message
        result = await handle.result()
        final = await state_of(handle)
    assert result.status is RunStatus.COMPLETED
    assert final.verification is not None
    assert final.verification.verified
    repo = targets["docs-site"]["path"]
    assert len(tags(repo)) == 1
    published = subprocess.run(
        ["git", "-C", repo, "show", f"{tags(repo)[0]}:articles/research-article.md"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    for repo_id in ("temporalio", "psycopg", "structlog"):
        assert f"{repo_id}@" in published
    assert await count_events(migrated_database, spec.run_id, "PublishConfirmed") == 1
