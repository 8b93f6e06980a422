"""Transcript store: items and large tool outputs by content hash, transcripts as chains of refs."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from psycopg.errors import ForeignKeyViolation
from psycopg_pool import AsyncConnectionPool

from adapters.statements import one_statement
from contracts.hashing import canonical_json, parse_blob_marker, sha256_hex, transcript_ref


class TranscriptMissingError(LookupError):
    """A ref that history names is not in the store (database reset or wrong database)."""


class _TranscriptCache:
    """Recently written transcripts by ref, as their canonical JSON bodies, least recently
    used out first, bounded by the bytes of the bodies each entry holds.

    A run's next model turn usually lands on the same worker (sticky workflow queue), so its
    parent is here and is not read back from Postgres. Entries hold immutable strings: a
    caller gets fresh dicts every time and cannot change what the next turn sees.
    """

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._entries: OrderedDict[str, tuple[tuple[str, ...], int, int]] = OrderedDict()
        self._bytes = 0

    def get(self, ref: str) -> tuple[tuple[str, ...], int] | None:
        entry = self._entries.get(ref)
        if entry is None:
            return None
        self._entries.move_to_end(ref)
        return entry[0], entry[1]

    def put(self, ref: str, bodies: tuple[str, ...], depth: int) -> None:
        size = sum(len(b) for b in bodies)
        if ref in self._entries or size > self._max:
            return
        self._entries[ref] = (bodies, depth, size)
        self._bytes += size
        while self._bytes > self._max and self._entries:
            _, (_, _, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped

    def discard(self, ref: str) -> None:
        entry = self._entries.pop(ref, None)
        if entry is not None:
            self._bytes -= entry[2]


class StagedAppend:
    """A transcript node computed but not yet written: its ref and whole transcript are
    known before the write, so a model turn can send the model its input while the node
    commits, and must await `commit()` before it names the ref anywhere durable."""

    def __init__(
        self,
        store: TranscriptStore,
        run_id: str,
        parent_ref: str | None,
        ref: str,
        prefix: tuple[str, ...],
        bodies: list[str],
        digests: list[str],
        depth: int,
    ) -> None:
        self._store = store
        self.run_id = run_id
        self.parent_ref = parent_ref
        self.ref = ref
        self.bodies = bodies
        self.digests = digests
        self.depth = depth
        self.bodies_all = (*prefix, *bodies)

    @property
    def items(self) -> list[dict[str, Any]]:
        """The whole transcript, parent first, as fresh dicts."""
        return [json.loads(b) for b in self.bodies_all]

    async def commit(self) -> None:
        """Write the node; TranscriptMissingError if its parent is not stored. Idempotent."""
        await self._store._write_node(self)


class TranscriptStore:
    """Postgres-backed, content-addressed; every write is an idempotent upsert."""

    def __init__(self, pool: AsyncConnectionPool, cache_bytes: int = 64 * 1024 * 1024) -> None:
        self._pool = pool
        self._cache = _TranscriptCache(cache_bytes)
        self._contexts: dict[str, str] = {}

    async def put_blob(self, body: str) -> str:
        digest = sha256_hex(body)
        await self._insert_blob(digest, body)
        return digest

    async def _insert_blob(self, key: str, body: str) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO blobs (digest, body, size_bytes) VALUES (%s, %s, %s)"
                " ON CONFLICT (digest) DO NOTHING",
                (key, body, len(body.encode())),
            )

    async def put_context(self, digest: str, body: str) -> None:
        """A model turn's agent context (instructions, tools, ...), stored once.

        `digest` is the hash of its canonical JSON while `body` keeps its own key order, so
        it lives under `ctx:<digest>`, apart from the blobs named by the hash of their body.
        """
        if digest in self._contexts:
            return
        await self._insert_blob(f"ctx:{digest}", body)
        self._remember_context(digest, body)

    async def get_context(self, digest: str) -> str:
        body = self._contexts.get(digest)
        if body is None:
            key = f"ctx:{digest}"
            body = (await self.get_blobs([key]))[key]
            self._remember_context(digest, body)
        return body

    def _remember_context(self, digest: str, body: str) -> None:
        self._contexts[digest] = body
        if len(self._contexts) > 512:  # agents x instruction variants; a few KB each
            self._contexts.pop(next(iter(self._contexts)))

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
        staged = await self.stage(run_id, parent_ref, items)
        await staged.commit()
        return staged.ref, staged.items

    async def stage(
        self, run_id: str, parent_ref: str | None, items: list[dict[str, Any]]
    ) -> StagedAppend:
        """The new ref and the whole transcript now; the write when `commit()` is awaited.

        Nodes are immutable and named by their content, so a parent this worker has seen is
        taken from memory; the write is one statement (blobs and node together, atomic in
        autocommit), and the parent's foreign key still proves the parent is stored.
        """
        bodies = [canonical_json(item) for item in items]
        digests = [sha256_hex(b) for b in bodies]
        prefix: tuple[str, ...] = ()
        depth = 0
        if parent_ref is not None:
            cached = self._cache.get(parent_ref)
            if cached is None:
                async with self._pool.connection() as conn:
                    loaded, depth = await self._load_bodies(conn, parent_ref)
                prefix = tuple(loaded)
            else:
                prefix, depth = cached
        return StagedAppend(
            self, run_id, parent_ref, transcript_ref(parent_ref, digests), prefix, bodies,
            digests, depth + 1,
        )  # fmt: skip

    async def _write_node(self, staged: StagedAppend) -> None:
        async with self._pool.connection() as conn:
            try:
                async with one_statement(conn):
                    await conn.execute(
                        "WITH stored AS (INSERT INTO blobs (digest, body, size_bytes)"
                        " SELECT * FROM unnest(%s::text[], %s::text[], %s::integer[])"
                        " ON CONFLICT (digest) DO NOTHING)"
                        " INSERT INTO transcript_nodes (ref, parent_ref, run_id, item_digests, depth)"
                        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (ref) DO NOTHING",
                        (staged.digests, staged.bodies, [len(b.encode()) for b in staged.bodies],
                         staged.ref, staged.parent_ref, staged.run_id, staged.digests,
                         staged.depth),
                    )  # fmt: skip
            except ForeignKeyViolation as err:
                if staged.parent_ref is not None:
                    self._cache.discard(staged.parent_ref)
                raise TranscriptMissingError(f"transcript {staged.parent_ref} not found") from err
        self._cache.put(staged.ref, staged.bodies_all, staged.depth)

    async def load(self, ref: str) -> list[dict[str, Any]]:
        cached = self._cache.get(ref)
        if cached is not None:
            return [json.loads(b) for b in cached[0]]
        async with self._pool.connection() as conn:
            bodies, _ = await self._load_bodies(conn, ref)
        return [json.loads(b) for b in bodies]

    async def _load_bodies(self, conn: Any, ref: str) -> tuple[list[str], int]:
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
        return [row[2] for row in rows], int(head[0])

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
