"""Canonical JSON and content hashes: the same value hashes the same in the workflow and outside."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace, so equal values give equal bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(data: str | bytes) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


def content_hash(value: Any) -> str:
    """sha256 of the canonical JSON of a JSON-able value."""
    return sha256_hex(canonical_json(value))


def transcript_ref(parent_ref: str | None, item_hashes: list[str]) -> str:
    """The ref of a transcript node: its parent's ref plus the hashes of the items it adds."""
    return sha256_hex((parent_ref or "") + "|" + ",".join(item_hashes))


BLOB_MARKER_PREFIX = "[groundwork:blob sha256:"


def blob_marker(digest: str, size: int, preview: str) -> str:
    """What the workflow history holds instead of a large tool output; the model sees the full text."""
    return f"{BLOB_MARKER_PREFIX}{digest} bytes={size}]\n{preview}"


def parse_blob_marker(text: str) -> str | None:
    """The digest named by a blob marker, or None if text is not one."""
    if not text.startswith(BLOB_MARKER_PREFIX):
        return None
    end = text.find(" ", len(BLOB_MARKER_PREFIX))
    if end < 0:
        return None
    return text[len(BLOB_MARKER_PREFIX) : end]
