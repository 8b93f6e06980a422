"""The seed 000 story on the real stack: research -> evidence -> draft -> approval -> publish."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)

from adapters.evidence import EvidenceStore
from contracts.approvals import ApprovalDecision, DecisionResult, Verdict, signed_decision
from contracts.research import (
    EvidenceBundle,
    Finding,
    ResearchSpec,
    ResearchState,
    SourceTree,
    bundle_hash,
)
from contracts.run import RunResult
from contracts.status import FailureReason, RunStatus
from tests.helpers import replayer, running_worker, write_script
from workers.research_client import start_research

SECRET = "s3cret-for-tests"
APPROVERS = {"erin": {"secret": SECRET, "roles": ["editor"]}}


def docs_site(tmp_path: Path) -> dict[str, Any]:
    return {"docs-site": {"kind": "git", "path": str(tmp_path / f"docs-{uuid.uuid4().hex[:6]}")}}


def research_spec(**extra: Any) -> ResearchSpec:
    values: dict[str, Any] = {
        "run_id": f"r-{uuid.uuid4().hex[:10]}",
        "question": "How do these libraries name their error and retry types?",
        # The publish key is global in the ledger (article, revision, bytes, destination
        # name): tests that write the same bytes to different repos need their own article.
        "article_id": f"article-{uuid.uuid4().hex[:8]}",
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


def decision_for(state: ResearchState, verdict: Verdict = Verdict.APPROVE) -> ApprovalDecision:
    assert state.pending_approval is not None
    return signed_decision(state.pending_approval, verdict, "erin", SECRET)


async def decide(
    handle: WorkflowHandle[Any, RunResult], decision: ApprovalDecision
) -> DecisionResult:
    result: DecisionResult = await handle.execute_update(
        "decide_approval", decision, result_type=DecisionResult
    )
    return result


async def replays(handle: WorkflowHandle[Any, RunResult]) -> None:
    """The run's own history replays on this code; GROUNDWORK_RECORD_HISTORIES keeps a copy."""
    history = await handle.fetch_history()
    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
    record_to = os.environ.get("GROUNDWORK_RECORD_HISTORIES")
    if record_to:
        (Path(record_to) / f"{handle.id}.json").write_text(history.to_json())


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
        await replays(handle)
    assert result.status is RunStatus.COMPLETED
    assert final.verification is not None
    assert final.verification.verified
    repo = targets["docs-site"]["path"]
    assert len(tags(repo)) == 1
    published = subprocess.run(
        ["git", "-C", repo, "show", f"{tags(repo)[0]}:articles/{spec.article_id}.md"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    for repo_id in ("temporalio", "psycopg", "structlog"):
        assert f"{repo_id}@" in published
    assert await count_events(migrated_database, spec.run_id, "PublishConfirmed") == 1


def delayed_branch(tmp_path: Path, delay_s: float) -> str:
    """The built-in branch script, its report delayed: branches finish in a chosen order."""
    script = json.loads(
        (Path(__file__).parents[2] / "definitions/scripts/research-branch.json").read_text()
    )
    script["turns"][1]["delay_s"] = delay_s
    return f"scripted:{write_script(tmp_path, script['turns'])}"


async def evidence_rows(database_url: str, research_id: str) -> list[EvidenceBundle]:
    async with AsyncConnectionPool(database_url, min_size=1, max_size=1, open=False) as pool:
        return await EvidenceStore(pool).bundles(research_id)


ORDERS = (("temporalio", "psycopg", "structlog"), ("structlog", "psycopg", "temporalio"))


async def _research_in_order(
    client: Client, task_queue: str, database_url: str, tmp_path: Path, order: tuple[str, ...]
) -> str:
    sources = [
        SourceTree(repo_id=repo, package=repo, branch_route=delayed_branch(tmp_path, 0.6 * rank))
        for rank, repo in enumerate(order)
    ]
    async with running_worker(
        client, task_queue, database_url, targets=docs_site(tmp_path), approvers=APPROVERS
    ):
        spec = research_spec(sources=sources)
        handle = await start_research(client, spec, task_queue)
        state = await wait_for(handle, lambda s: s.pending_approval is not None)
        await handle.cancel()
    accepted = [e.data["repo_id"] for e in state.last_events if e.type == "EvidenceBundleAccepted"]
    assert accepted == list(order)  # they really did finish in this order
    rows = await evidence_rows(database_url, spec.run_id)
    assert sorted(r.repo_id for r in rows) == sorted(order)  # one immutable bundle per repo
    for row in rows:
        assert row.produced_by == f"{spec.run_id}.branch-{row.repo_id}"
        assert row.artifact_hash == bundle_hash(row.repo_id, row.source_revision, row.findings)
        assert row.source_revision == state.branches[row.repo_id].source_revision
        assert row.findings
    manifests = {s.manifest_hash for s in state.evidence_sets}
    assert len(manifests) == 1
    return manifests.pop()


async def test_branches_finishing_in_any_order_never_overwrite_each_others_evidence(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path
) -> None:
    manifests = {
        await _research_in_order(client, task_queue, migrated_database, tmp_path, order)
        for order in ORDERS
    }
    # The set is a function of the evidence, not of the order it arrived in.
    assert len(manifests) == 1


async def test_late_bundle_makes_a_new_set_and_revision_and_the_old_approval_never_publishes(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path
) -> None:
    targets = docs_site(tmp_path)
    sources = [
        SourceTree(repo_id="temporalio", package="temporalio"),
        SourceTree(
            repo_id="structlog", package="structlog", branch_route=delayed_branch(tmp_path, 6)
        ),
    ]
    async with running_worker(
        client, task_queue, migrated_database, targets=targets, approvers=APPROVERS
    ):
        spec = research_spec(sources=sources, branch_timeout_s=2, on_branch_failure="close_without")
        handle = await start_research(client, spec, task_queue)
        first = await wait_for(handle, lambda s: s.pending_approval is not None)
        assert first.pending_approval is not None
        assert first.pending_approval.revision == "1"
        assert first.evidence_sets[0].missing == ["structlog"]
        assert "without evidence from structlog" in first.pending_approval.preview
        r1 = decision_for(first)
        second = await wait_for(
            handle, lambda s: s.pending_approval is not None and s.pending_approval.revision == "2"
        )
        assert len(second.evidence_sets) == 2
        assert second.evidence_sets[1].missing == []
        assert second.evidence_sets[1].manifest_hash != second.evidence_sets[0].manifest_hash
        assert second.branches["structlog"].late
        # The approval of r1 is refused before it enters history, naming the current revision,
        # and so is the same decision sent as a plain signal.
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await decide(handle, r1)
        assert "the current revision is 2" in str(refused.value.cause)
        await handle.signal("approve", r1)
        assert (await state_of(handle)).pending_approval is not None
        answer = await decide(handle, decision_for(second))
        assert answer.accepted, answer.message
        result = await handle.result()
        await replays(handle)
    assert result.status is RunStatus.COMPLETED
    repo = targets["docs-site"]["path"]
    assert len(tags(repo)) == 1
    assert "-r2-" in tags(repo)[0]
    async with (
        AsyncConnectionPool(migrated_database, min_size=1, max_size=1, open=False) as pool,
        pool.connection() as conn,
    ):
        cur = await conn.execute("SELECT effect_key FROM effects WHERE run_id = %s", (spec.run_id,))
        keys = [r[0] for r in await cur.fetchall()]
        cur = await conn.execute(
            "SELECT revision, status FROM approvals WHERE run_id = %s ORDER BY requested_at",
            (spec.run_id,),
        )
        approvals = [tuple(r) for r in await cur.fetchall()]
    assert len(keys) == 1
    assert keys[0].startswith(f"{spec.article_id}:r2:")
    assert approvals == [("1", "superseded"), ("2", "approved")]
    async with AsyncConnectionPool(migrated_database, min_size=1, max_size=1, open=False) as pool:
        store = EvidenceStore(pool)
        sets, drafts = await store.sets(spec.run_id), await store.drafts(spec.run_id)
    assert [(s.version, s.manifest_hash) for s in sets] == [
        (s.version, s.manifest_hash) for s in second.evidence_sets
    ]
    assert [(d.revision, d.evidence_set_version) for d in drafts] == [(1, 1), (2, 2)]
    published = subprocess.run(
        ["git", "-C", repo, "show", f"{tags(repo)[0]}:{drafts[1].path}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert published == drafts[1].content  # what was stored as r2 is what was published


async def test_conflicting_source_revision_is_a_conflict_and_duplicates_change_nothing(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path
) -> None:
    async with running_worker(
        client, task_queue, migrated_database, targets=docs_site(tmp_path), approvers=APPROVERS
    ):
        spec = research_spec(sources=[SourceTree(repo_id="psycopg", package="psycopg")])
        handle = await start_research(client, spec, task_queue)
        state = await wait_for(handle, lambda s: s.pending_approval is not None)
        sealed = (await evidence_rows(migrated_database, spec.run_id))[0]
        # The same bundle delivered again: nothing changes.
        await handle.signal("deliver_bundle", sealed.ref())
        await wait_for(
            handle, lambda s: any(e.type == "EvidenceBundleDuplicate" for e in s.last_events)
        )
        # A ref nobody sealed (a wrong hash): refused, nothing changes.
        forged = sealed.ref().model_copy(update={"artifact_hash": "0" * 64})
        await handle.signal("deliver_bundle", forged)
        await wait_for(
            handle, lambda s: any(e.type == "EvidenceBundleRefused" for e in s.last_events)
        )
        # A bundle for the same repo at another revision (sealed by someone else).
        findings = [Finding(path="errors.py", line=1, excerpt="x")]
        other = EvidenceBundle(
            research_id=spec.run_id, repo_id="psycopg", source_revision="9.9.9+deadbeef",
            findings=findings, artifact_hash=bundle_hash("psycopg", "9.9.9+deadbeef", findings),
            produced_by="someone-else",
        )  # fmt: skip
        async with AsyncConnectionPool(
            migrated_database, min_size=1, max_size=1, open=False
        ) as pool:
            await EvidenceStore(pool).put_bundle(other)
        await handle.signal("deliver_bundle", other.ref())
        after = await wait_for(handle, lambda s: bool(s.conflicts))
        assert after.conflicts[0].got_revision == "9.9.9+deadbeef"
        assert after.conflicts[0].expected_revision == sealed.source_revision
        assert len(after.evidence_sets) == 1  # neither made a new set or a new draft
        assert after.pending_approval == state.pending_approval
        await handle.cancel()
    assert await count_events(migrated_database, spec.run_id, "EvidenceConflict") == 1


async def test_published_content_that_does_not_match_fails_the_run_unverified(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path
) -> None:
    from adapters.targets.git_repo import init_repo

    targets = docs_site(tmp_path)
    repo = init_repo(targets["docs-site"]["path"])
    # A clean filter in the docs site rewrites what is committed: the tool says success.
    subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "config",
            "filter.house-style.clean",
            "sed -e s/Evidence/Sources/",
        ],
        check=True,
    )
    (repo / ".gitattributes").write_text("articles/*.md filter=house-style\n")
    async with running_worker(
        client, task_queue, migrated_database, targets=targets, approvers=APPROVERS
    ):
        spec = research_spec(sources=[SourceTree(repo_id="structlog", package="structlog")])
        handle = await start_research(client, spec, task_queue)
        state = await wait_for(handle, lambda s: s.pending_approval is not None)
        assert (await decide(handle, decision_for(state))).accepted
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        final = await state_of(handle)
    assert final.status is RunStatus.FAILED
    assert final.failure_reason is FailureReason.UNVERIFIED
    assert final.verification is not None
    assert not final.verification.verified
    assert final.published_ref is not None  # the tool said it published
    assert len(tags(str(repo))) == 1
    assert await count_events(migrated_database, spec.run_id, "ClaimUnverified") == 1


async def test_a_local_git_repository_is_researched_at_its_pinned_commit(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path
) -> None:
    from adapters.targets.git_repo import git_env, init_repo

    source = init_repo(tmp_path / "service")
    (source / "errors.py").write_text(
        "import os\n\n\nclass QuotaExceededError(Exception):\n    pass\n"
    )
    for args in (["add", "errors.py"], ["commit", "-q", "-m", "errors"]):
        subprocess.run(["git", "-C", str(source), *args], check=True, env=git_env())
    commit = subprocess.run(
        ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # The work tree changes after the commit; the research reads the commit, not this.
    (source / "errors.py").write_text("class Changed:\n    pass\n")
    async with running_worker(
        client, task_queue, migrated_database, targets=docs_site(tmp_path), approvers=APPROVERS
    ):
        spec = research_spec(sources=[SourceTree(repo_id="service", git_path=str(source))])
        handle = await start_research(client, spec, task_queue)
        state = await wait_for(handle, lambda s: s.pending_approval is not None)
        await handle.cancel()
    assert state.branches["service"].source_revision == commit
    (bundle,) = await evidence_rows(migrated_database, spec.run_id)
    assert [(f.path, f.line, f.excerpt) for f in bundle.findings] == [
        ("errors.py", 4, "class QuotaExceededError(Exception):")
    ]
    assert state.pending_approval is not None
    assert f"service@{commit}" in state.pending_approval.preview


async def test_a_required_branch_that_times_out_fails_the_run_under_the_fail_policy(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path
) -> None:
    sources = [
        SourceTree(repo_id="psycopg", package="psycopg"),
        SourceTree(
            repo_id="structlog", package="structlog", branch_route=delayed_branch(tmp_path, 8)
        ),
    ]
    async with running_worker(
        client, task_queue, migrated_database, targets=docs_site(tmp_path), approvers=APPROVERS
    ):
        spec = research_spec(sources=sources, branch_timeout_s=1.5, on_branch_failure="fail")
        handle = await start_research(client, spec, task_queue)
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        final = await state_of(handle)
    assert final.failure_reason is FailureReason.EVIDENCE_INCOMPLETE
    assert final.failure_message is not None
    assert "structlog" in final.failure_message
    assert final.branches["structlog"].status.value == "timed_out"
    assert not final.evidence_sets  # no set, so no draft and no approval
    assert not final.drafts


async def test_a_failed_branch_is_left_out_and_said_so_under_close_without(
    client: Client, task_queue: str, migrated_database: str, tmp_path: Path
) -> None:
    broken = write_script(tmp_path, [{"text": "nothing here cites a line"}])
    sources = [
        SourceTree(repo_id="psycopg", package="psycopg"),
        SourceTree(repo_id="structlog", package="structlog", branch_route=f"scripted:{broken}"),
    ]
    async with running_worker(
        client, task_queue, migrated_database, targets=docs_site(tmp_path), approvers=APPROVERS
    ):
        spec = research_spec(sources=sources, on_branch_failure="close_without")
        handle = await start_research(client, spec, task_queue)
        state = await wait_for(handle, lambda s: s.pending_approval is not None)
        await handle.cancel()
    assert state.branches["structlog"].status.value == "failed"
    assert state.evidence_sets[0].missing == ["structlog"]
    assert state.pending_approval is not None
    assert "without evidence from structlog" in state.pending_approval.preview
