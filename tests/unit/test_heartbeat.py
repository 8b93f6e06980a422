"""heartbeating(): beats every third of the heartbeat timeout inside the block, none after."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities._heartbeat import heartbeating


def environment(heartbeat_timeout: timedelta | None) -> tuple[ActivityEnvironment, list[Any]]:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        ActivityEnvironment.default_info(), heartbeat_timeout=heartbeat_timeout
    )
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    return env, beats


async def test_beats_while_the_block_runs_and_stops_with_it() -> None:
    env, beats = environment(timedelta(seconds=0.6))  # a beat every 0.2 s

    async def slow() -> tuple[int, int]:
        async with heartbeating():
            await asyncio.sleep(0.1)
            at_start = len(beats)
            await asyncio.sleep(0.45)
        return at_start, len(beats)

    at_start, during = await env.run(slow)
    assert at_start == 0  # the first beat waits one interval
    assert during >= 1
    await asyncio.sleep(0.5)
    assert len(beats) == during  # the timer went with the block


async def test_a_short_block_sends_no_heartbeat() -> None:
    env, beats = environment(timedelta(seconds=3))

    async def quick() -> None:
        async with heartbeating():
            await asyncio.sleep(0.01)

    await env.run(quick)
    assert beats == []


async def test_the_timer_goes_when_the_block_raises() -> None:
    env, beats = environment(timedelta(seconds=0.3))

    async def failing() -> None:
        async with heartbeating():
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await env.run(failing)
    await asyncio.sleep(0.3)
    assert beats == []


async def test_without_a_heartbeat_timeout_nothing_is_scheduled() -> None:
    env, beats = environment(None)

    async def body() -> None:
        async with heartbeating():
            await asyncio.sleep(0.05)

    await env.run(body)
    assert beats == []
