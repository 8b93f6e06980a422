"""Steers are placed where they arrived, and every later turn sees the same prefix."""

from __future__ import annotations

from typing import Any

from workflows._model_stub import with_injected


def _items(n: int) -> list[dict[str, Any]]:
    return [{"type": "message", "n": i} for i in range(n)]


def test_an_injected_item_stays_where_it_arrived_as_the_transcript_grows() -> None:
    steer = {"role": "user", "content": "also mention X"}
    injected = [(3, steer)]
    at_injection = with_injected(_items(3), injected)
    later = with_injected(_items(6), injected)
    assert at_injection == [*_items(3), steer]
    assert later[: len(at_injection)] == at_injection  # the stored prefix is reused
    assert later == [*_items(3), steer, *_items(6)[3:]]


def test_several_injections_keep_their_order_and_survive_a_shorter_list() -> None:
    first, second = {"role": "user", "content": "a"}, {"role": "user", "content": "b"}
    injected = [(2, first), (2, second), (4, {"role": "user", "content": "c"})]
    merged = with_injected(_items(5), injected)
    assert [m.get("content", m.get("n")) for m in merged] == [0, 1, "a", "b", 2, 3, "c", 4]
    # A handoff filter may shorten the SDK's list: the injected items still come, after it.
    assert [m.get("content", m.get("n")) for m in with_injected(_items(1), injected)] == [
        0,
        "a",
        "b",
        "c",
    ]
    assert with_injected(_items(2), []) == _items(2)
