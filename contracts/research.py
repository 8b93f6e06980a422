"""The flagship case (seed 000): research over source trees -> evidence -> draft -> publish.

Every fact in here is immutable once made: a branch seals one EvidenceBundle for one
pinned source revision; the required set closes into an EvidenceSet with a manifest hash;
a draft names the set it was written from; the publish effect's key names the draft's
revision and content hash. Pure models and functions only: the workflow imports them.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts.hashing import content_hash, sha256_hex
from contracts.run import ActivityTimeouts, Budgets, RunState

RESEARCH_WORKFLOW_TYPE = "Research"
SEAL_BUNDLE_ACTIVITY = "groundwork.research.seal_bundle"
PIN_SOURCES_ACTIVITY = "groundwork.research.pin_sources"
LOAD_BUNDLE_ACTIVITY = "groundwork.research.load_bundle"
RECORD_SET_ACTIVITY = "groundwork.research.record_set"
RECORD_DRAFT_ACTIVITY = "groundwork.research.record_draft"
RECORD_EVENT_ACTIVITY = "groundwork.research.record_event"
VERIFY_PUBLICATION_ACTIVITY = "groundwork.research.verify_publication"

PUBLISH_TOOL = "publish_article"
PUBLISHER_AGENT = "publisher"
"""The catalog agent owning the governed publish tool; the workflow, not a model, calls it."""

_ID = r"^[A-Za-z0-9_.\-]+$"


class SourceTree(BaseModel):
    """One tree to research: an installed package, or a local git repository at a revision."""

    model_config = ConfigDict(extra="forbid")

    repo_id: str = Field(min_length=1, max_length=64, pattern=_ID)
    package: str | None = None
    """An importable package name: its installed source is the tree."""
    git_path: str | None = None
    """A local git repository: the tree is `rev` of it, read from git, not the work tree."""
    rev: str = "HEAD"
    branch_route: str | None = None
    """This tree's branch model route, when it differs from the spec's `branch_route`."""

    @model_validator(mode="after")
    def _one_kind(self) -> SourceTree:
        if (self.package is None) == (self.git_path is None):
            raise ValueError("a source tree is either `package` or `git_path`")
        return self


class PinnedSource(BaseModel):
    """A tree fixed at start: everything the branch reads and cites is at this revision."""

    repo_id: str
    branch_route: str | None = None
    locator: str
    """`package:<name>` or `git:<absolute path>@<commit>`: what the branch's tools read."""
    source_revision: str
    """`<version>+<tree hash>` for a package, the commit for a git repository."""
    files: int = 0


class Finding(BaseModel):
    """One cited fact: the line exists at the pinned revision; the excerpt is read from it."""

    path: str
    line: int = Field(ge=1)
    excerpt: str
    """The cited line as it is in the tree (not as the model quoted it)."""
    note: str = ""
    """What the branch said about it."""
    quote_matches: bool = True
    """Whether the text the branch attached to the citation is the line itself."""


class EvidenceBundle(BaseModel):
    """What one branch may write, once: its findings for its repo at its revision."""

    research_id: str
    repo_id: str
    source_revision: str
    findings: list[Finding]
    artifact_hash: str
    produced_by: str
    """The run that produced it (the branch's run_id)."""
    rejected_citations: int = 0
    """Citations the branch made that do not exist at the pinned revision; never evidence."""

    def ref(self) -> BundleRef:
        return BundleRef(
            repo_id=self.repo_id,
            source_revision=self.source_revision,
            artifact_hash=self.artifact_hash,
        )


def bundle_hash(repo_id: str, source_revision: str, findings: list[Finding]) -> str:
    return content_hash(
        {
            "repo_id": repo_id,
            "source_revision": source_revision,
            "findings": [f.model_dump(mode="json") for f in findings],
        }
    )


class BundleRef(BaseModel):
    """A sealed bundle by identity: what `deliver_bundle` carries."""

    model_config = ConfigDict(extra="forbid")

    repo_id: str
    source_revision: str
    artifact_hash: str


class EvidenceSet(BaseModel):
    """The closed set a draft is written from; a new bundle makes a new set, never an edit."""

    version: int
    bundles: list[BundleRef]
    missing: list[str] = Field(default_factory=list)
    """Required repos the set closed without (branch failed or timed out), said in the draft."""
    manifest_hash: str

    @staticmethod
    def close(version: int, bundles: list[BundleRef], missing: list[str]) -> EvidenceSet:
        ordered = sorted(bundles, key=lambda b: b.repo_id)
        manifest = content_hash(
            {"bundles": [b.model_dump(mode="json") for b in ordered], "missing": sorted(missing)}
        )
        return EvidenceSet(
            version=version, bundles=ordered, missing=sorted(missing), manifest_hash=manifest
        )


class Draft(BaseModel):
    article_id: str
    revision: int
    evidence_set_version: int
    evidence_manifest_hash: str
    path: str
    content: str
    content_hash: str
    editor_run_id: str


class DraftSummary(BaseModel):
    """A draft as run state shows it (the content stays in Postgres)."""

    revision: int
    evidence_set_version: int
    evidence_manifest_hash: str
    content_hash: str
    claims: int


class BranchStatus(StrEnum):
    RUNNING = "running"
    SEALED = "sealed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"


class BranchState(BaseModel):
    repo_id: str
    run_id: str
    source_revision: str
    status: BranchStatus = BranchStatus.RUNNING
    artifact_hash: str | None = None
    findings: int = 0
    rejected_citations: int = 0
    late: bool = False
    """Sealed after the set had closed without it."""
    message: str | None = None


class EvidenceConflict(BaseModel):
    """A bundle that contradicts the pinned revision or an already sealed bundle."""

    repo_id: str
    expected_revision: str
    got_revision: str
    artifact_hash: str
    reason: str
    at: datetime


class Verification(BaseModel):
    """The ClaimVerifier's reading of the destination, not the tool's word."""

    verified: bool
    external_ref: str | None = None
    tag: str | None = None
    commit: str | None = None
    path: str | None = None
    expected_hash: str
    actual_hash: str | None = None
    message: str


BranchFailurePolicy = Literal["fail", "close_without"]


class ResearchSpec(BaseModel):
    """The input of ResearchWorkflow."""

    model_config = ConfigDict(extra="forbid")

    run_id: str = Field(min_length=1, max_length=96, pattern=_ID)
    question: str = Field(min_length=1)
    sources: list[SourceTree] = Field(min_length=1, max_length=32)
    required: list[str] | None = None
    """Repos the set needs before a draft; default: all of them."""
    on_branch_failure: BranchFailurePolicy = "close_without"
    branch_timeout_s: float = Field(default=600.0, gt=0)
    branch_route: str = "scripted:research-branch"
    editor_route: str = "scripted:research-editor"
    article_id: str = Field(default="research-article", pattern=_ID)
    title: str = "What the sources say"
    destination: str = "docs-site"
    principal: str = "local-user"
    tenant: str = "default"
    branch_budgets: Budgets = Field(default_factory=lambda: Budgets(max_steps=8, max_tool_calls=8))
    timeouts: ActivityTimeouts = Field(default_factory=ActivityTimeouts)
    """For the publish effect and every child run's model turns and tool calls."""

    @model_validator(mode="after")
    def _consistent(self) -> ResearchSpec:
        ids = [s.repo_id for s in self.sources]
        if len(set(ids)) != len(ids):
            raise ValueError("source repo_ids must be unique")
        unknown = set(self.required or []) - set(ids)
        if unknown:
            raise ValueError(f"required names unknown sources: {', '.join(sorted(unknown))}")
        return self

    def required_ids(self) -> list[str]:
        return (
            list(self.required) if self.required is not None else [s.repo_id for s in self.sources]
        )


class ResearchState(RunState):
    """`get_state` of a research run: a RunState (so run and approval tools read it) plus
    the branches, the evidence sets, the drafts and what the verifier saw."""

    question: str = ""
    branches: dict[str, BranchState] = Field(default_factory=dict)
    evidence_sets: list[EvidenceSet] = Field(default_factory=list)
    drafts: list[DraftSummary] = Field(default_factory=list)
    conflicts: list[EvidenceConflict] = Field(default_factory=list)
    published_ref: str | None = None
    verification: Verification | None = None


class SealBundleInput(BaseModel):
    research_id: str
    pinned: PinnedSource
    branch_run_id: str
    report: str
    """The branch's final answer: findings as `path:line: ...` lines."""


class RecordEventInput(BaseModel):
    run_id: str
    type: str
    dedupe_key: str
    data: dict[str, object] = Field(default_factory=dict)


class RecordSetInput(BaseModel):
    research_id: str
    evidence_set: EvidenceSet


class VerifyPublicationInput(BaseModel):
    run_id: str
    target: str
    effect_key: str
    path: str
    expected_hash: str


# -- evidence ids, the editor's input, the article ------------------------------------

_CITE = re.compile(r"\[(E\d+)\]")
_HEADING = re.compile(r"^\s*(#|>|---|\|)")


def evidence_ids(bundles: list[EvidenceBundle]) -> dict[str, tuple[EvidenceBundle, Finding]]:
    """E1..En over the set's bundles in repo order, findings in their order: deterministic."""
    numbered: dict[str, tuple[EvidenceBundle, Finding]] = {}
    for bundle in sorted(bundles, key=lambda b: b.repo_id):
        for finding in bundle.findings:
            numbered[f"E{len(numbered) + 1}"] = (bundle, finding)
    return numbered


def editor_prompt(question: str, title: str, numbered: dict[str, tuple[EvidenceBundle, Finding]],
                  missing: list[str]) -> str:  # fmt: skip
    lines = [
        f"title: {title}",
        f"question: {question}",
        "",
        "Write a short article answering the question from this evidence only. Every sentence",
        "that states a fact must cite the evidence it rests on as [E<n>]. Do not add facts",
        "that no evidence below supports.",
        "",
        "Evidence (one finding per line):",
    ]
    for eid, (bundle, finding) in numbered.items():
        lines.append(
            f"- {bundle.repo_id} `{finding.path}:{finding.line}`: `{finding.excerpt.strip()}` [{eid}]"
        )
    if missing:
        lines += ["", f"No evidence from: {', '.join(missing)} (say so)."]
    return "\n".join(lines)


def claims_of(body: str) -> list[str]:
    """The lines of an article body that state something: not blank, not a heading or rule."""
    return [line for line in body.splitlines() if line.strip() and not _HEADING.match(line)]


def citation_problems(body: str, known: set[str]) -> list[str]:
    """Every claim must cite at least one known evidence id, and cite nothing else."""
    problems: list[str] = []
    for line in claims_of(body):
        cited = _CITE.findall(line)
        if not cited:
            problems.append(f"uncited claim: {line.strip()[:120]!r}")
        for eid in cited:
            if eid not in known:
                problems.append(f"cites unknown evidence {eid}: {line.strip()[:120]!r}")
    return problems


def render_article(*, title: str, question: str, body: str, revision: int,
                   evidence_set: EvidenceSet, numbered: dict[str, tuple[EvidenceBundle, Finding]]) -> str:  # fmt: skip
    """The published file: the editor's body plus what Groundwork itself knows to be true."""
    out = [f"# {title}", "", f"> {question}", "", body.strip(), ""]
    if evidence_set.missing:
        out += [
            f"> Note: this revision was written without evidence from "
            f"{', '.join(evidence_set.missing)} (branch failed or timed out).",
            "",
        ]
    out += ["## Evidence", ""]
    for eid, (bundle, finding) in numbered.items():
        out.append(
            f"- [{eid}] {bundle.repo_id}@{bundle.source_revision} "
            f"`{finding.path}:{finding.line}`: `{finding.excerpt.strip()}`"
        )
    out += [
        "",
        "---",
        f"revision {revision} · evidence set {evidence_set.version} · "
        f"manifest {evidence_set.manifest_hash[:16]}",
        "",
    ]
    return "\n".join(out)


def article_effect_key(article_id: str, revision: int, digest: str, destination: str) -> str:
    """The publish effect's business identity: which article, which revision, which bytes, where."""
    return f"{article_id}:r{revision}:{digest}:{destination}"


def article_hash(content: str) -> str:
    return sha256_hex(content)
