"""Evidence in Postgres: sealed bundles, closed sets, drafts; and the sealing itself.

Sealing reads the branch's report, keeps only citations that exist at the pinned revision
(the excerpt is read from the tree, not taken from the model), hashes the result and
inserts it once. The row is immutable: the same (research, repo, revision) sealed again
returns the first bundle, whatever the second attempt produced.
"""

from __future__ import annotations

import re
from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from adapters.source_trees import SourceTreeError, open_tree
from contracts.research import (
    BundleRef,
    Draft,
    EvidenceBundle,
    EvidenceSet,
    Finding,
    PinnedSource,
    bundle_hash,
)

MAX_FINDINGS = 40
_CITATION = re.compile(r"^\s*[-*]?\s*`?(?P<path>[\w./\-]+\.pyi?):(?P<line>\d+)`?:?\s*(?P<rest>.*)$")


def parse_findings(pinned: PinnedSource, report: str) -> tuple[list[Finding], int]:
    """(findings that exist at the pinned revision, citations that do not)."""
    tree = open_tree(pinned.locator)
    cache: dict[str, list[str] | None] = {}
    findings: list[Finding] = []
    rejected = 0
    seen: set[tuple[str, int]] = set()
    for raw in report.splitlines():
        match = _CITATION.match(raw)
        if not match:
            continue
        path, number, rest = match["path"], int(match["line"]), match["rest"].strip()
        if path not in cache:
            try:
                cache[path] = tree.read(path)
            except SourceTreeError:
                cache[path] = None
        lines = cache[path]
        if lines is None or not 1 <= number <= len(lines):
            rejected += 1
            continue
        if (path, number) in seen:
            continue
        seen.add((path, number))
        excerpt = lines[number - 1].rstrip()
        findings.append(
            Finding(
                path=path,
                line=number,
                excerpt=excerpt,
                note=rest[:500],
                quote_matches=rest == excerpt.strip() or not rest,
            )
        )
        if len(findings) >= MAX_FINDINGS:
            break
    return findings, rejected


def seal(research_id: str, pinned: PinnedSource, branch_run_id: str, report: str) -> EvidenceBundle:
    findings, rejected = parse_findings(pinned, report)
    return EvidenceBundle(
        research_id=research_id,
        repo_id=pinned.repo_id,
        source_revision=pinned.source_revision,
        findings=findings,
        artifact_hash=bundle_hash(pinned.repo_id, pinned.source_revision, findings),
        produced_by=branch_run_id,
        rejected_citations=rejected,
    )


class EvidenceStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def put_bundle(self, bundle: EvidenceBundle) -> EvidenceBundle:
        """Insert once; the bundle already sealed under this identity wins (immutable)."""
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO evidence (research_id, repo_id, source_revision, artifact_hash,"
                " produced_by, findings, rejected_citations) VALUES (%s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                (
                    bundle.research_id,
                    bundle.repo_id,
                    bundle.source_revision,
                    bundle.artifact_hash,
                    bundle.produced_by,
                    Jsonb([f.model_dump(mode="json") for f in bundle.findings]),
                    bundle.rejected_citations,
                ),
            )
            stored = await self._get(
                conn, bundle.research_id, bundle.repo_id, bundle.source_revision
            )
        assert stored is not None
        return stored

    async def get_bundle(self, research_id: str, ref: BundleRef) -> EvidenceBundle | None:
        async with self._pool.connection() as conn:
            found = await self._get(conn, research_id, ref.repo_id, ref.source_revision)
        if found is None or found.artifact_hash != ref.artifact_hash:
            return None
        return found

    async def bundles(self, research_id: str) -> list[EvidenceBundle]:
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                "SELECT * FROM evidence WHERE research_id = %s ORDER BY repo_id, sealed_at",
                (research_id,),
            )
            return [_bundle(row) for row in await cur.fetchall()]

    async def _get(
        self, conn: Any, research_id: str, repo_id: str, source_revision: str
    ) -> EvidenceBundle | None:
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(
            "SELECT * FROM evidence WHERE research_id = %s AND repo_id = %s AND source_revision = %s",
            (research_id, repo_id, source_revision),
        )
        row = await cur.fetchone()
        return _bundle(row) if row else None

    async def put_set(self, research_id: str, evidence_set: EvidenceSet) -> None:
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO evidence_sets (research_id, version, manifest_hash, bundles, missing)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (
                    research_id,
                    evidence_set.version,
                    evidence_set.manifest_hash,
                    Jsonb([b.model_dump(mode="json") for b in evidence_set.bundles]),
                    evidence_set.missing,
                ),
            )

    async def sets(self, research_id: str) -> list[EvidenceSet]:
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                "SELECT version, manifest_hash, bundles, missing FROM evidence_sets"
                " WHERE research_id = %s ORDER BY version",
                (research_id,),
            )
            return [EvidenceSet.model_validate(row) for row in await cur.fetchall()]

    async def put_draft(self, research_id: str, draft: Draft) -> None:
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO drafts (research_id, article_id, revision, evidence_set_version,"
                " evidence_manifest_hash, path, content, content_hash, editor_run_id)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (
                    research_id, draft.article_id, draft.revision, draft.evidence_set_version,
                    draft.evidence_manifest_hash, draft.path, draft.content, draft.content_hash,
                    draft.editor_run_id,
                ),
            )  # fmt: skip

    async def drafts(self, research_id: str) -> list[Draft]:
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                "SELECT * FROM drafts WHERE research_id = %s ORDER BY revision", (research_id,)
            )
            return [Draft.model_validate(row) for row in await cur.fetchall()]

    async def append_event(
        self, run_id: str, event_type: str, dedupe_key: str, data: dict[str, Any]
    ) -> None:
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO run_events (run_id, type, data, dedupe_key) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING",
                (run_id, event_type, Jsonb(data), dedupe_key),
            )


def _bundle(row: dict[str, Any]) -> EvidenceBundle:
    return EvidenceBundle(
        research_id=row["research_id"],
        repo_id=row["repo_id"],
        source_revision=row["source_revision"],
        findings=[Finding.model_validate(f) for f in row["findings"]],
        artifact_hash=row["artifact_hash"],
        produced_by=row["produced_by"],
        rejected_citations=row["rejected_citations"],
    )
