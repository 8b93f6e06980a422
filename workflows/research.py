"""ResearchWorkflow: the flagship run of seed 000, durable end to end.

Fan-out: one child AgentRun per pinned source tree; each branch's report is sealed into
its own immutable EvidenceBundle (nothing shared and mutable). Fan-in: the required set
closes into an EvidenceSet before any draft. An editor AgentRun writes the draft from that
set; every claim must cite it. The approval binds the draft's revision and content hash;
the publish is an irreversible effect through the ledger; the run is COMPLETED only after
the verifier re-read the destination. A late bundle makes a new set and a new revision,
which supersedes the approval in flight.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from definitions.editor import article_path, publish_article
    from definitions.governed import EffectDeclaration, effect_of

from contracts.approvals import Verdict
from contracts.effects import EffectStatus, NeedsApproval, PreparedCall
from contracts.prepare import prepare
from contracts.research import (
    LOAD_BUNDLE_ACTIVITY,
    PIN_SOURCES_ACTIVITY,
    PUBLISH_TOOL,
    PUBLISHER_AGENT,
    RECORD_DRAFT_ACTIVITY,
    RECORD_EVENT_ACTIVITY,
    RECORD_SET_ACTIVITY,
    RESEARCH_WORKFLOW_TYPE,
    SEAL_BUNDLE_ACTIVITY,
    VERIFY_PUBLICATION_ACTIVITY,
    BranchState,
    BranchStatus,
    BundleRef,
    Draft,
    DraftSummary,
    EvidenceBundle,
    EvidenceConflict,
    EvidenceSet,
    PinnedSource,
    RecordEventInput,
    RecordSetInput,
    ResearchSpec,
    ResearchState,
    SealBundleInput,
    Verification,
    VerifyPublicationInput,
    article_hash,
    citation_problems,
    claims_of,
    editor_prompt,
    evidence_ids,
    render_article,
)
from contracts.run import (
    RUN_WORKFLOW_TYPE,
    ApprovalRule,
    Budgets,
    EffectClass,
    Release,
    RunResult,
    RunSpec,
    ToolPolicy,
    workflow_id_for,
)
from contracts.search_attributes import initial_attributes
from contracts.status import FailureReason, RunStatus
from workflows._effects import EffectsMixin
from workflows._run_base import TOOL_RETRY

RECORD_TIMEOUT = timedelta(seconds=30)


def branch_run_id(research_id: str, repo_id: str) -> str:
    return f"{research_id}.branch-{repo_id}"


def editor_run_id(research_id: str, revision: int) -> str:
    return f"{research_id}.editor-r{revision}"


def branch_task(pin: PinnedSource, question: str) -> str:
    # `key: value` lines first: the task is data for a real model and for the scripted one.
    return "\n".join(
        [
            f"source: {pin.locator}",
            f"repo: {pin.repo_id}",
            f"revision: {pin.source_revision}",
            f"question: {question}",
            "",
            "Research this one source tree for the question. Use the `source` locator above with "
            "your tools. Report each finding on its own line as `path:line: what it shows`.",
        ]
    )


@workflow.defn(name=RESEARCH_WORKFLOW_TYPE)
class ResearchWorkflow(EffectsMixin):
    _state: ResearchState

    @workflow.init
    def __init__(self, spec: ResearchSpec) -> None:
        self._research = spec
        declaration = effect_of(publish_article)
        assert declaration is not None
        self._publish: EffectDeclaration = dataclasses.replace(declaration, target=spec.destination)
        self._spec = RunSpec(
            run_id=spec.run_id,
            release=Release(agent="research", model_route=spec.editor_route, release_id="flagship"),
            input=spec.question,
            principal=spec.principal,
            tenant=spec.tenant,
            budgets=Budgets(max_steps=1, max_tool_calls=1),
            timeouts=spec.timeouts,
            policy={
                PUBLISH_TOOL: ToolPolicy(
                    effect_class=EffectClass.IRREVERSIBLE,
                    approval=ApprovalRule.ALWAYS,
                    send_within_s=declaration.send_within_s,
                )
            },
        )
        self._state = ResearchState(
            run_id=spec.run_id,
            agent="research",
            tenant=spec.tenant,
            budgets=self._spec.budgets,
            question=spec.question,
        )
        self._current_agent = "research"
        self._init_run_parts()
        self._pins: dict[str, PinnedSource] = {}
        self._bundles: dict[str, EvidenceBundle] = {}
        self._pinned = False
        self._closed = False
        self._publishing = False
        self._changed = False
        self._revision = 0
        self._subject = f"article-{spec.article_id}"
        self._tasks: list[asyncio.Task[None]] = []

    @workflow.query
    def get_state(self) -> ResearchState:
        return self._state

    @workflow.signal
    async def deliver_bundle(self, ref: BundleRef) -> None:
        """Deliver a sealed bundle by identity (a re-run branch, a producer outside this run)."""
        await workflow.wait_condition(lambda: self._pinned)
        bundle: EvidenceBundle | None = await workflow.execute_activity(
            LOAD_BUNDLE_ACTIVITY,
            args=[self._research.run_id, ref],
            result_type=EvidenceBundle | None,  # type: ignore[arg-type]
            start_to_close_timeout=RECORD_TIMEOUT,
            retry_policy=TOOL_RETRY,
        )
        if bundle is None:
            self._event("EvidenceBundleRefused", repo_id=ref.repo_id, reason="not sealed")
            return
        await self._accept(bundle, via="signal")

    @workflow.run
    async def run(self, spec: ResearchSpec) -> RunResult:
        self._transition(RunStatus.RUNNING, "RunStarted", sources=len(spec.sources))
        expected_id = workflow_id_for(spec.run_id)
        if workflow.info().workflow_id != expected_id:
            self._fail(FailureReason.AGENT_ERROR, f"workflow id must be {expected_id!r}")
        try:
            return await self._research_and_publish(spec)
        except asyncio.CancelledError:
            self._cancelled()
            raise

    async def _research_and_publish(self, spec: ResearchSpec) -> RunResult:
        await self._pin(spec)
        for pin in self._pins.values():
            self._tasks.append(asyncio.create_task(self._branch(pin)))
        required = spec.required_ids()
        try:
            await workflow.wait_condition(
                lambda: all(self._branch_done(r) for r in required) or self._task_crashed(),
                timeout=timedelta(seconds=spec.branch_timeout_s),
            )
            self._raise_task_failure()
        except TimeoutError:
            for repo_id in required:
                if not self._branch_done(repo_id):
                    self._state.branches[repo_id].status = BranchStatus.TIMED_OUT
                    self._event("BranchTimedOut", repo_id=repo_id, after_s=spec.branch_timeout_s)
        missing = [r for r in required if r not in self._bundles]
        if missing and spec.on_branch_failure == "fail":
            self._fail(
                FailureReason.EVIDENCE_INCOMPLETE,
                f"required branches without evidence: {', '.join(missing)}",
            )
        self._closed = True
        while True:
            self._changed = False
            evidence_set = await self._close_set(required)
            draft = await self._write_draft(evidence_set)
            if self._changed:
                continue  # a bundle arrived while the editor wrote: draft from the new set
            arguments = self._publish_arguments(draft)
            needed = self._prepare_publish(arguments, approved=False)
            assert isinstance(needed, NeedsApproval)
            decision = await self._await_approval(PUBLISH_TOOL, self._publish, needed, arguments)
            if self._changed:
                continue  # superseded, before or after its grant: the mixin recorded it
            if decision.verdict is Verdict.REJECT:
                self._fail(
                    FailureReason.REJECTED,
                    f"revision {draft.revision} rejected by {decision.principal}: "
                    f"{decision.reason or 'no reason given'}; nothing was published",
                )
            break
        return await self._publish_and_verify(draft, arguments)

    # -- fan-out ---------------------------------------------------------------------------

    async def _pin(self, spec: ResearchSpec) -> None:
        try:
            pins: list[PinnedSource] = await workflow.execute_activity(
                PIN_SOURCES_ACTIVITY,
                spec.sources,
                result_type=list[PinnedSource],
                start_to_close_timeout=timedelta(seconds=120),
                retry_policy=TOOL_RETRY,
                summary=f"pin {len(spec.sources)} source trees",
            )
        except ActivityError as err:
            self._fail(FailureReason.AGENT_ERROR, f"cannot pin the sources: {err.cause or err}")
        for pin in pins:
            self._pins[pin.repo_id] = pin
            self._state.branches[pin.repo_id] = BranchState(
                repo_id=pin.repo_id,
                run_id=branch_run_id(spec.run_id, pin.repo_id),
                source_revision=pin.source_revision,
            )
        self._pinned = True
        self._event("SourcesPinned", sources={p.repo_id: p.source_revision for p in pins})

    def _task_crashed(self) -> bool:
        return any(t.done() and not t.cancelled() and t.exception() for t in self._tasks)

    def _raise_task_failure(self) -> None:
        """A bug in a branch task fails the workflow task (retried once fixed), never a hang."""
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise RuntimeError("research branch task crashed") from task.exception()

    def _branch_done(self, repo_id: str) -> bool:
        return self._state.branches[repo_id].status is not BranchStatus.RUNNING

    async def _branch(self, pin: PinnedSource) -> None:
        spec = self._research
        run_id = branch_run_id(spec.run_id, pin.repo_id)
        branch = self._state.branches[pin.repo_id]
        child = RunSpec(
            run_id=run_id,
            release=Release(
                agent="repo-researcher",
                model_route=pin.branch_route or spec.branch_route,
                release_id="flagship",
            ),
            input=branch_task(pin, spec.question),
            principal=spec.principal,
            tenant=spec.tenant,
            session_id=spec.run_id,
            budgets=spec.branch_budgets,
            timeouts=spec.timeouts,
        )
        try:
            result: RunResult = await workflow.execute_child_workflow(
                RUN_WORKFLOW_TYPE,
                child,
                id=workflow_id_for(run_id),
                result_type=RunResult,
                parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                search_attributes=initial_attributes("repo-researcher", spec.tenant, "flagship"),
                static_summary=f"research branch {pin.repo_id} @ {pin.source_revision}",
            )
        except ChildWorkflowError as err:
            self._branch_failed(branch, f"branch run failed: {err.cause or err}")
            return
        if not result.final_output:
            self._branch_failed(branch, "branch run ended without a report")
            return
        try:
            bundle: EvidenceBundle = await workflow.execute_activity(
                SEAL_BUNDLE_ACTIVITY,
                SealBundleInput(
                    research_id=spec.run_id,
                    pinned=pin,
                    branch_run_id=run_id,
                    report=result.final_output,
                ),
                result_type=EvidenceBundle,
                start_to_close_timeout=timedelta(seconds=120),
                retry_policy=TOOL_RETRY,
                summary=f"seal evidence {pin.repo_id}",
            )
        except ActivityError as err:
            self._branch_failed(branch, f"sealing failed: {err.cause or err}")
            return
        if not bundle.findings:
            self._branch_failed(
                branch, f"no citation in the report exists at {pin.source_revision}"
            )
            return
        await self._accept(bundle, via="branch")

    def _branch_failed(self, branch: BranchState, message: str) -> None:
        if branch.status is BranchStatus.RUNNING:
            branch.status = BranchStatus.FAILED
        branch.message = message
        self._event("BranchFailed", repo_id=branch.repo_id, message=message)

    async def _accept(self, bundle: EvidenceBundle, via: str) -> None:
        """Idempotent for the same bundle; a Conflict for anything that contradicts the pins."""
        pin = self._pins.get(bundle.repo_id)
        if pin is None:
            self._event("EvidenceBundleRefused", repo_id=bundle.repo_id, reason="not a source")
            return
        held = self._bundles.get(bundle.repo_id)
        if held is not None and held.ref() == bundle.ref():
            self._event("EvidenceBundleDuplicate", repo_id=bundle.repo_id, via=via)
            return
        if bundle.source_revision != pin.source_revision or held is not None:
            reason = (
                f"source revision {bundle.source_revision} is not the pinned {pin.source_revision}"
                if bundle.source_revision != pin.source_revision
                else "a different bundle is already sealed for this revision"
            )
            conflict = EvidenceConflict(
                repo_id=bundle.repo_id,
                expected_revision=pin.source_revision,
                got_revision=bundle.source_revision,
                artifact_hash=bundle.artifact_hash,
                reason=reason,
                at=workflow.now(),
            )
            self._state.conflicts.append(conflict)
            self._event("EvidenceConflict", repo_id=bundle.repo_id, reason=reason, via=via)
            await self._record_event(
                "EvidenceConflict",
                f"conflict:{bundle.repo_id}:{bundle.artifact_hash}",
                conflict.model_dump(mode="json"),
            )
            return
        self._bundles[bundle.repo_id] = bundle
        branch = self._state.branches[bundle.repo_id]
        late = self._closed and bundle.repo_id not in self._current_set_repos()
        branch.status = BranchStatus.SEALED
        branch.artifact_hash = bundle.artifact_hash
        branch.findings = len(bundle.findings)
        branch.rejected_citations = bundle.rejected_citations
        branch.late = late
        self._event(
            "EvidenceBundleAccepted",
            repo_id=bundle.repo_id,
            artifact_hash=bundle.artifact_hash,
            findings=len(bundle.findings),
            late=late,
            via=via,
        )
        if late and not self._publishing:
            # The next draft is a new revision; any approval of the current one is void.
            self._changed = True
            self._latest_revision[self._subject] = str(self._revision + 1)
            self._event("LateBundle", repo_id=bundle.repo_id, next_revision=self._revision + 1)
        elif late:
            self._event("LateBundleAfterPublish", repo_id=bundle.repo_id)

    # -- fan-in, the draft ----------------------------------------------------------------

    def _current_set_repos(self) -> set[str]:
        if not self._state.evidence_sets:
            return set()
        return {b.repo_id for b in self._state.evidence_sets[-1].bundles}

    async def _close_set(self, required: list[str]) -> EvidenceSet:
        evidence_set = EvidenceSet.close(
            len(self._state.evidence_sets) + 1,
            [b.ref() for b in self._bundles.values()],
            [r for r in required if r not in self._bundles],
        )
        self._state.evidence_sets.append(evidence_set)
        await workflow.execute_activity(
            RECORD_SET_ACTIVITY,
            RecordSetInput(research_id=self._research.run_id, evidence_set=evidence_set),
            start_to_close_timeout=RECORD_TIMEOUT,
            retry_policy=TOOL_RETRY,
        )
        data = {
            "version": evidence_set.version,
            "manifest_hash": evidence_set.manifest_hash,
            "repos": [b.repo_id for b in evidence_set.bundles],
            "missing": evidence_set.missing,
        }
        self._event("EvidenceSetClosed", **data)
        await self._record_event("EvidenceSetClosed", f"set:{evidence_set.version}", data)
        return evidence_set

    async def _write_draft(self, evidence_set: EvidenceSet) -> Draft:
        spec = self._research
        revision = self._revision + 1
        bundles = [self._bundles[ref.repo_id] for ref in evidence_set.bundles]
        numbered = evidence_ids(bundles)
        if not numbered:
            self._fail(FailureReason.EVIDENCE_INCOMPLETE, "no branch produced any evidence")
        run_id = editor_run_id(spec.run_id, revision)
        try:
            result: RunResult = await workflow.execute_child_workflow(
                RUN_WORKFLOW_TYPE,
                RunSpec(
                    run_id=run_id,
                    release=Release(
                        agent="editor", model_route=spec.editor_route, release_id="flagship"
                    ),
                    input=editor_prompt(spec.question, spec.title, numbered, evidence_set.missing),
                    principal=spec.principal,
                    tenant=spec.tenant,
                    session_id=spec.run_id,
                    budgets=Budgets(max_steps=3, max_tool_calls=0),
                    timeouts=spec.timeouts,
                ),
                id=workflow_id_for(run_id),
                result_type=RunResult,
                search_attributes=initial_attributes("editor", spec.tenant, "flagship"),
                static_summary=f"editor, draft r{revision} from evidence set {evidence_set.version}",
            )
        except ChildWorkflowError as err:
            self._fail(FailureReason.AGENT_ERROR, f"editor run failed: {err.cause or err}")
        body = result.final_output or ""
        problems = citation_problems(body, set(numbered))
        if problems:
            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            self._fail(FailureReason.UNVERIFIED, f"draft r{revision} refused: {problems[0]}{more}")
        content = render_article(
            title=spec.title, question=spec.question, body=body, revision=revision,
            evidence_set=evidence_set, numbered=numbered,
        )  # fmt: skip
        draft = Draft(
            article_id=spec.article_id,
            revision=revision,
            evidence_set_version=evidence_set.version,
            evidence_manifest_hash=evidence_set.manifest_hash,
            path=article_path(spec.article_id),
            content=content,
            content_hash=article_hash(content),
            editor_run_id=run_id,
        )
        self._revision = revision
        await workflow.execute_activity(
            RECORD_DRAFT_ACTIVITY,
            args=[spec.run_id, draft],
            start_to_close_timeout=RECORD_TIMEOUT,
            retry_policy=TOOL_RETRY,
        )
        summary = DraftSummary(
            revision=revision,
            evidence_set_version=evidence_set.version,
            evidence_manifest_hash=evidence_set.manifest_hash,
            content_hash=draft.content_hash,
            claims=len(claims_of(body)),
        )
        self._state.drafts.append(summary)
        self._event("DraftCreated", **summary.model_dump(mode="json"))
        await self._record_event(
            "DraftCreated", f"draft:{revision}", summary.model_dump(mode="json")
        )
        return draft

    # -- approval, publish, verify ----------------------------------------------------------

    def _publish_arguments(self, draft: Draft) -> dict[str, Any]:
        return {
            "article_id": draft.article_id,
            "revision": draft.revision,
            "content": draft.content,
            "destination": self._research.destination,
        }

    def _prepare_publish(
        self, arguments: dict[str, Any], approved: bool
    ) -> PreparedCall | NeedsApproval:
        decision = prepare(
            run_id=self._research.run_id,
            agent_name=PUBLISHER_AGENT,
            owner_agent=PUBLISHER_AGENT,
            tool_name=PUBLISH_TOOL,
            call_id=f"publish-r{arguments['revision']}",
            arguments=arguments,
            policy=self._spec.policy[PUBLISH_TOOL],
            target=self._publish.target,
            effect_key=self._publish.effect_key(arguments),
            domain_event=self._publish.domain_event,
            now=workflow.now(),
            approved=approved,
        )
        if not isinstance(decision, PreparedCall | NeedsApproval):
            self._fail(FailureReason.AGENT_ERROR, f"publish denied: {decision.reason}")
        return decision

    async def _publish_and_verify(self, draft: Draft, arguments: dict[str, Any]) -> RunResult:
        self._publishing = True
        call = self._prepare_publish(arguments, approved=True)
        assert isinstance(call, PreparedCall)
        self._state.usage.tool_calls += 1
        self._event(
            "EffectPrepared",
            tool=PUBLISH_TOOL,
            effect_key=call.effect_key,
            effect_class=call.effect_class.value,
            target=call.target,
        )
        outcome = await self._dispatch_until_settled(call)
        self._event(
            "EffectSettled",
            tool=PUBLISH_TOOL,
            effect_key=call.effect_key,
            status=outcome.status.value,
            external_ref=outcome.external_ref,
            replayed=outcome.replayed,
        )
        if outcome.status is not EffectStatus.SUCCEEDED:
            self._fail(
                FailureReason.TOOL_ERROR,
                f"publish r{draft.revision} {outcome.status.value}: {outcome.message}",
            )
        self._state.published_ref = outcome.external_ref
        verification: Verification = await workflow.execute_activity(
            VERIFY_PUBLICATION_ACTIVITY,
            VerifyPublicationInput(
                run_id=self._research.run_id,
                target=call.target,
                effect_key=call.effect_key,
                path=draft.path,
                expected_hash=draft.content_hash,
            ),
            result_type=Verification,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=TOOL_RETRY,
            summary=f"verify {draft.path} at {call.target}",
        )
        self._state.verification = verification
        kind = "ClaimVerified" if verification.verified else "ClaimUnverified"
        self._event(kind, message=verification.message, tag=verification.tag)
        await self._record_event(kind, f"claim:{call.effect_key}", verification.model_dump())
        if not verification.verified:
            self._fail(FailureReason.UNVERIFIED, verification.message)
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._raise_task_failure()
        self._state.final_output = (
            f"published {draft.path} revision {draft.revision} to {call.target} as "
            f"{outcome.external_ref}; verified: {verification.message}"
        )
        self._transition(
            RunStatus.COMPLETED, "RunCompleted", revision=draft.revision, ref=outcome.external_ref
        )
        return self._result()

    async def _record_event(self, event_type: str, key: str, data: dict[str, Any]) -> None:
        await workflow.execute_activity(
            RECORD_EVENT_ACTIVITY,
            RecordEventInput(
                run_id=self._research.run_id,
                type=event_type,
                dedupe_key=f"{self._research.run_id}:{key}",
                data=data,
            ),
            start_to_close_timeout=RECORD_TIMEOUT,
            retry_policy=TOOL_RETRY,
        )
