from __future__ import annotations

from contracts.hashing import blob_marker, content_hash, parse_blob_marker, transcript_ref


def test_content_hash_ignores_key_order() -> None:
    assert content_hash({"a": 1, "b": [1, 2]}) == content_hash({"b": [1, 2], "a": 1})


def test_transcript_ref_depends_on_parent_and_items() -> None:
    assert transcript_ref(None, ["x"]) != transcript_ref("p", ["x"])
    assert transcript_ref("p", ["x", "y"]) != transcript_ref("p", ["y", "x"])


def test_blob_marker_round_trip() -> None:
    marker = blob_marker("ab" * 32, 100_000, "preview text")
    assert parse_blob_marker(marker) == "ab" * 32
    assert parse_blob_marker("plain tool output") is None
