"""Transcript store: items and large tool outputs by content hash, transcripts as chains of refs."""

from __future__ import annotations

import json
from typing import Any

from psycopg_pool import AsyncConnectionPool

from contracts.hashing import canonical_json, parse_blob_marker, sha256_hex, transcript_ref


class TranscriptMissingError(LookupError):
    """A ref that history names is not in the store (database reset or wrong database)."""


class TranscriptStore:
    """Postgres-backed, content-addressed; every write is an idempotent upsert."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def put_blob(self, body: str) -> str:
        digest = sha256_hex(body)
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO blobs (digest, body, size_bytes) VALUES (%s, %s, %s)"
                " ON CONFLICT (digest) DO NOTHING",
                (digest, body, len(body.encode())),
            )
        return digest

    async def get_blobs(self, digests: list[str]) -> dict[str, str]:
        if not digests:
            return {}
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT digest, body FROM blobs WHERE digest = ANY(%s)", (list(set(digests)),)
            )
            rows = await cur.fetchall()
        found = {row[0]: row[1] for row in rows}
        missing = set(digests) - found.keys()
        if missing:
            raise TranscriptMissingError(f"blobs not found: {sorted(missing)[:3]}")
        return found

    async def append(
        self, run_id: str, parent_ref: str | None, items: list[dict[str, Any]]
    ) -> tuple[str, list[dict[str, Any]]]:
        """Store items after parent_ref; return the new ref and the whole transcript."""
        bodies = [canonical_json(item) for item in items]
        digests = [sha256_hex(b) for b in bodies]
        ref = transcript_ref(parent_ref, digests)
        async with self._pool.connection() as conn, conn.transaction():
            prefix: list[dict[str, Any]] = []
            depth = 0
            if parent_ref is not None:
                prefix, depth = await self._load_txn(conn, parent_ref)
            if bodies:
                await conn.cursor().executemany(
                    "INSERT INTO blobs (digest, body, size_bytes) VALUES (%s, %s, %s)"
                    " ON CONFLICT (digest) DO NOTHING",
                    [(d, b, len(b.encode())) for d, b in zip(digests, bodies, strict=True)],
                )
            await conn.execute(
                "INSERT INTO transcript_nodes (ref, parent_ref, run_id, item_digests, depth)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (ref) DO NOTHING",
                (ref, parent_ref, run_id, digests, depth + 1),
            )
        return ref, prefix + [json.loads(b) for b in bodies]

    async def load(self, ref: str) -> list[dict[str, Any]]:
        async with self._pool.connection() as conn:
            items, _ = await self._load_txn(conn, ref)
        return items

    async def _load_txn(self, conn: Any, ref: str) -> tuple[list[dict[str, Any]], int]:
        cur = await conn.execute(
            "WITH RECURSIVE chain AS ("
            "  SELECT ref, parent_ref, item_digests, depth FROM transcript_nodes WHERE ref = %s"
            "  UNION ALL"
            "  SELECT n.ref, n.parent_ref, n.item_digests, n.depth"
            "  FROM transcript_nodes n JOIN chain c ON n.ref = c.parent_ref"
            ") SELECT c.depth, d.ord, b.body FROM chain c"
            " CROSS JOIN LATERAL unnest(c.item_digests) WITH ORDINALITY AS d(digest, ord)"
            " JOIN blobs b ON b.digest = d.digest"
            " ORDER BY c.depth, d.ord",
            (ref,),
        )
        rows = await cur.fetchall()
        cur = await conn.execute("SELECT depth FROM transcript_nodes WHERE ref = %s", (ref,))
        head = await cur.fetchone()
        if head is None:
            raise TranscriptMissingError(f"transcript {ref} not found")
        return [json.loads(row[2]) for row in rows], int(head[0])

    async def expand_markers(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Replace tool outputs stored by reference with their full text, for the model's eyes."""
        wanted: dict[int, str] = {}
        for index, item in enumerate(items):
            output = item.get("output")
            if item.get("type") == "function_call_output" and isinstance(output, str):
                digest = parse_blob_marker(output)
                if digest:
                    wanted[index] = digest
        if not wanted:
            return items
        bodies = await self.get_blobs(list(wanted.values()))
        expanded = list(items)
        for index, digest in wanted.items():
            expanded[index] = {**items[index], "output": bodies[digest]}
        return expanded
