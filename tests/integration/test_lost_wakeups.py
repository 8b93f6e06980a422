"""The lost wake-up race, on real Postgres: subscription installs and input submissions run
concurrently on separate connections, with random delays injected between each side's
insert and its scan of the other side. Every matching input must be delivered to every
matching subscription exactly once, and nothing else delivered.

A control runs the same race with a naive install (scan inputs first, then subscribe) and
must lose wake-ups, so the test is known to be able to fail."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
from psycopg_pool import AsyncConnectionPool

from adapters.waits import Pause, WaitStore
from contracts.waits import Delivery, Subscription

TRIALS = 500
Install = Callable[[WaitStore, Subscription, Pause], Awaitable[list[Delivery]]]


@pytest.fixture
async def store(migrated_database: str) -> AsyncIterator[WaitStore]:
    async with AsyncConnectionPool(
        migrated_database, min_size=8, max_size=16, kwargs={"autocommit": True}
    ) as pool:
        yield WaitStore(pool)


def _pause(rng: random.Random) -> Pause:
    delay = rng.choice([0.0, 0.0, 0.0005, 0.002, 0.005])

    async def pause() -> None:
        await asyncio.sleep(delay)

    return pause


async def _correct_install(store: WaitStore, sub: Subscription, pause: Pause) -> list[Delivery]:
    return await store.install(sub, pause=pause)


async def _naive_install(store: WaitStore, sub: Subscription, pause: Pause) -> list[Delivery]:
    """Scan first, subscribe after: the classic lost wake-up."""
    seen = await store.deliveries(sub.subscription_id)
    found: list[Delivery] = []
    async with store._pool.connection() as conn:  # test-only access to the pool
        cur = await conn.execute(
            "SELECT input_id FROM inputs WHERE type = %s AND subject = %s", (sub.type, sub.subject)
        )
        ids = [row[0] for row in await cur.fetchall()]
    await pause()
    mute = sub.model_copy(
        update={"type": f"{sub.type}#naive"}
    )  # the insert; its own scan finds nothing
    await store.install(mute)
    async with store._pool.connection() as conn:
        await conn.execute(
            "UPDATE subscriptions SET type = %s WHERE subscription_id = %s",
            (sub.type, sub.subscription_id),
        )
        for input_id in ids:
            await conn.execute(
                "INSERT INTO deliveries (subscription_id, input_id, run_id) VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                (sub.subscription_id, input_id, sub.run_id),
            )
    found.extend(seen)
    return found


async def _trial(
    store: WaitStore, rng: random.Random, trial: int, install: Install
) -> tuple[int, int]:
    subject = f"race-{uuid.uuid4().hex[:10]}"
    expires = datetime.now(UTC) + timedelta(hours=1)
    subscriptions = [
        Subscription(
            subscription_id=f"{subject}-s{n}",
            run_id=f"run-{trial}-{n}",
            type="deploy.finished",
            subject=subject,
            expires_at=expires,
        )
        for n in range(rng.randint(1, 2))
    ]
    inputs = [("deploy.finished", subject) for _ in range(rng.randint(1, 3))]
    inputs.append(("deploy.started", subject))  # same subject, other type: must never match

    async def do_install(sub: Subscription) -> None:
        await asyncio.sleep(rng.random() * 0.003)
        await install(store, sub, _pause(rng))

    async def do_submit(type_: str, subj: str) -> None:
        await asyncio.sleep(rng.random() * 0.003)
        await store.submit(type_, subj, {"trial": trial}, pause=_pause(rng))

    jobs = [do_install(s) for s in subscriptions] + [do_submit(t, s) for t, s in inputs]
    rng.shuffle(jobs)
    await asyncio.gather(*jobs)
    stored = [d for s in subscriptions for d in await store.deliveries(s.subscription_id)]
    pairs = Counter((d.subscription_id, d.input.input_id) for d in stored)
    assert all(count == 1 for count in pairs.values())
    assert all(d.input.type == "deploy.finished" for d in stored)
    return len(pairs), (len(inputs) - 1) * len(subscriptions)


async def test_every_matching_input_is_delivered_exactly_once(store: WaitStore) -> None:
    rng = random.Random(20261202)
    lost = []
    for trial in range(TRIALS):
        delivered, expected = await _trial(store, rng, trial, _correct_install)
        if delivered != expected:
            lost.append((trial, delivered, expected))
    assert not lost, lost[:10]


async def test_control_a_naive_install_loses_wake_ups(store: WaitStore) -> None:
    rng = random.Random(7)
    lost = 0
    for trial in range(150):
        delivered, expected = await _trial(store, rng, trial, _naive_install)
        lost += expected - delivered
    assert lost > 0, "the race harness never produced the race it is meant to catch"
