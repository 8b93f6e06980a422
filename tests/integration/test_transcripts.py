"""The transcript store on real Postgres: a warm worker (its cache) and a cold one (a restart,
another worker) see the same transcript, and a parent that is not stored is refused."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from adapters.transcripts import TranscriptMissingError, TranscriptStore


def _item(n: int) -> dict[str, object]:
    return {"role": "user", "content": f"message {n}", "type": "message"}


async def test_warm_and_cold_stores_agree_and_a_missing_parent_is_refused(
    migrated_database: str,
) -> None:
    run_id = f"tx-{uuid.uuid4().hex[:8]}"
    async with AsyncConnectionPool(
        migrated_database, min_size=1, max_size=2, kwargs={"autocommit": True}
    ) as pool:
        warm = TranscriptStore(pool)
        root, items = await warm.append(run_id, None, [_item(0)])
        child, items = await warm.append(run_id, root, [_item(1), _item(2)])
        assert items == [_item(0), _item(1), _item(2)]
        items[0]["content"] = "changed by a caller"  # must not reach the next turn
        grandchild, items = await warm.append(run_id, child, [_item(3)])
        assert items == [_item(n) for n in range(4)]

        cold = TranscriptStore(pool)  # a restarted worker: nothing cached
        assert await cold.load(grandchild) == [_item(n) for n in range(4)]
        other, items = await cold.append(run_id, child, [_item(9)])
        assert items == [_item(0), _item(1), _item(2), _item(9)]
        assert await warm.load(other) == items

        with pytest.raises(TranscriptMissingError):
            await cold.append(run_id, "tr-" + "0" * 64, [_item(5)])

        # The database lost a node the warm store still remembers: the write is refused.
        lonely, _ = await warm.append(run_id, None, [_item(7)])
        async with await psycopg.AsyncConnection.connect(migrated_database, autocommit=True) as c:
            await c.execute("DELETE FROM transcript_nodes WHERE ref = %s", (lonely,))
        with pytest.raises(TranscriptMissingError):
            await warm.append(run_id, lonely, [_item(8)])
    async with AsyncConnectionPool(migrated_database, min_size=1, max_size=1) as plain:
        # A pool without autocommit gets its own transaction: the node is stored, not rolled back.
        tx_ref, _ = await TranscriptStore(plain).append(run_id, grandchild, [_item(4)])
        assert len(await TranscriptStore(plain).load(tx_ref)) == 5


async def test_an_agent_context_is_read_back_by_a_cold_store_and_a_missing_one_refused(
    migrated_database: str,
) -> None:
    digest = uuid.uuid4().hex
    body = '{"tools":[{"name":"b"},{"name":"a"}],"system_instructions":"be brief"}'
    async with AsyncConnectionPool(
        migrated_database, min_size=1, max_size=2, kwargs={"autocommit": True}
    ) as pool:
        await TranscriptStore(pool).put_context(digest, body)
        await TranscriptStore(pool).put_context(digest, body)  # a retried first turn
        assert await TranscriptStore(pool).get_context(digest) == body  # byte for byte
        with pytest.raises(TranscriptMissingError):
            await TranscriptStore(pool).get_context(uuid.uuid4().hex)
