"""Research activities: pin the trees, seal bundles, record sets and drafts, verify the claim.

Each is safe for Temporal to retry: pinning reads, sealing inserts once per identity,
records insert once per key, verification re-reads the destination.
"""

from __future__ import annotations

import asyncio
import importlib.metadata

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities._context import activity_logger
from adapters.evidence import EvidenceStore, seal
from adapters.source_trees import SourceTreeError, pin_git, pin_package
from adapters.targets import Committed
from adapters.targets.git_repo import GitRepoTarget
from adapters.targets.registry import TargetRegistry, UnknownTargetError
from contracts.hashing import sha256_hex
from contracts.research import (
    LOAD_BUNDLE_ACTIVITY,
    PIN_SOURCES_ACTIVITY,
    RECORD_DRAFT_ACTIVITY,
    RECORD_EVENT_ACTIVITY,
    RECORD_SET_ACTIVITY,
    SEAL_BUNDLE_ACTIVITY,
    VERIFY_PUBLICATION_ACTIVITY,
    BundleRef,
    Draft,
    EvidenceBundle,
    PinnedSource,
    RecordEventInput,
    RecordSetInput,
    SealBundleInput,
    SourceTree,
    Verification,
    VerifyPublicationInput,
)


class ResearchActivities:
    def __init__(self, store: EvidenceStore, targets: TargetRegistry) -> None:
        self._store = store
        self._targets = targets

    @activity.defn(name=PIN_SOURCES_ACTIVITY)
    async def pin_sources(self, sources: list[SourceTree]) -> list[PinnedSource]:
        distributions = importlib.metadata.packages_distributions()

        def pin(source: SourceTree) -> PinnedSource:
            if source.package is not None:
                locator, revision, files = pin_package(source.package, distributions)
            else:
                assert source.git_path is not None
                locator, revision, files = pin_git(source.git_path, source.rev)
            return PinnedSource(
                repo_id=source.repo_id,
                locator=locator,
                source_revision=revision,
                files=files,
                branch_route=source.branch_route,
            )

        try:
            pinned = await asyncio.to_thread(lambda: [pin(s) for s in sources])
        except SourceTreeError as err:
            raise ApplicationError(str(err), type="SourceUnavailable", non_retryable=True) from err
        activity_logger().info(
            "sources_pinned", sources={p.repo_id: p.source_revision for p in pinned}
        )
        return pinned

    @activity.defn(name=SEAL_BUNDLE_ACTIVITY)
    async def seal_bundle(self, request: SealBundleInput) -> EvidenceBundle:
        try:
            bundle = await asyncio.to_thread(
                seal, request.research_id, request.pinned, request.branch_run_id, request.report
            )
        except SourceTreeError as err:
            raise ApplicationError(str(err), type="SourceUnavailable", non_retryable=True) from err
        stored = await self._store.put_bundle(bundle)
        activity_logger(repo_id=stored.repo_id).info(
            "evidence_sealed",
            source_revision=stored.source_revision,
            artifact_hash=stored.artifact_hash,
            findings=len(stored.findings),
            rejected_citations=stored.rejected_citations,
            first_writer=stored.artifact_hash == bundle.artifact_hash,
        )
        return stored

    @activity.defn(name=LOAD_BUNDLE_ACTIVITY)
    async def load_bundle(self, research_id: str, ref: BundleRef) -> EvidenceBundle | None:
        return await self._store.get_bundle(research_id, ref)

    @activity.defn(name=RECORD_SET_ACTIVITY)
    async def record_set(self, request: RecordSetInput) -> None:
        await self._store.put_set(request.research_id, request.evidence_set)

    @activity.defn(name=RECORD_DRAFT_ACTIVITY)
    async def record_draft(self, research_id: str, draft: Draft) -> None:
        await self._store.put_draft(research_id, draft)

    @activity.defn(name=RECORD_EVENT_ACTIVITY)
    async def record_event(self, request: RecordEventInput) -> None:
        await self._store.append_event(
            request.run_id, request.type, request.dedupe_key, dict(request.data)
        )

    @activity.defn(name=VERIFY_PUBLICATION_ACTIVITY)
    async def verify_publication(self, request: VerifyPublicationInput) -> Verification:
        """Re-read the destination: the tag for the effect key, the file at it, its hash."""
        log = activity_logger(effect_key=request.effect_key, target=request.target)

        def unverified(message: str, **fields: str | None) -> Verification:
            log.warning("claim_unverified", reason=message)
            return Verification(
                verified=False, expected_hash=request.expected_hash, message=message, **fields
            )

        try:
            target = self._targets.get(request.target)
        except UnknownTargetError as err:
            return unverified(str(err))
        if not isinstance(target, GitRepoTarget):
            return unverified(f"target {request.target!r} cannot be re-read by the verifier")
        found = await target.reconcile(request.effect_key)
        if not isinstance(found, Committed):
            return unverified(f"no receipt for {request.effect_key!r} at {request.target}")
        tag, commit = str(found.details.get("tag")), str(found.details.get("commit"))
        content = await target.read_published(commit, request.path)
        if content is None:
            return unverified(f"{request.path} is not in {tag}", tag=tag, commit=commit)
        actual = sha256_hex(content)
        if actual != request.expected_hash:
            return unverified(
                f"{request.path} at {tag} has sha256 {actual[:16]}…, not the approved "
                f"{request.expected_hash[:16]}…",
                tag=tag, commit=commit, path=request.path, actual_hash=actual,
                external_ref=found.external_ref,
            )  # fmt: skip
        log.info("claim_verified", tag=tag, commit=commit)
        return Verification(
            verified=True,
            external_ref=found.external_ref,
            tag=tag,
            commit=commit,
            path=request.path,
            expected_hash=request.expected_hash,
            actual_hash=actual,
            message=f"{request.path} at {tag} matches the approved content",
        )
