"""`DirectoryTarget`: write a file into a local directory, exactly once per effect key.

The receipt is a manifest `<dir>/.effects/<sha256(key)>.json`. The order of durable steps
makes a crash at any point safe: the content is written to a temp file, fsynced and renamed
into place (directory fsynced) *before* the manifest is written the same way. So either no
manifest exists (not committed; a retry rewrites the same content) or the manifest exists
and its content was in place when it was written.

Writers serialize on an flock in `.effects/`, so two workers cannot both find the manifest
missing and both write. The blocking file work runs in a worker thread that owns the lock
from start to finish: cancelling the awaiting coroutine cannot release it mid-write.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from adapters.targets._filelock import LockTimeout, locked_sync
from adapters.targets.base import (
    Committed,
    EffectTarget,
    NotCommitted,
    Reconciliation,
    TargetConflictError,
    TargetRejectedError,
    TargetTransientError,
    Unknown,
)

MANIFEST_DIR = ".effects"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(target: Path, data: bytes) -> None:
    """Temp file in the same directory, fsync, rename over `target`, fsync the directory."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.parent / f".{target.name}.{uuid.uuid4().hex}.gw-tmp"
    try:
        with open(temp, "xb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


class DirectoryTarget(EffectTarget):
    """Payload `{"path": "relative/file.md", "content": "..."}`; `external_ref` = `path@sha12`."""

    def __init__(
        self, root: str | Path, *, name: str = "filesystem", lock_timeout_s: float = 60.0
    ) -> None:
        self.name = name
        self.root = Path(root).resolve()
        self._lock_timeout_s = lock_timeout_s

    @property
    def manifests(self) -> Path:
        return self.root / MANIFEST_DIR

    def manifest_path(self, effect_key: str) -> Path:
        return self.manifests / f"{_sha256(effect_key.encode())}.json"

    def _validate(self, payload: dict[str, Any]) -> tuple[str, Path, bytes]:
        path, content = payload.get("path"), payload.get("content")
        if not isinstance(path, str) or not path or not isinstance(content, str):
            raise TargetRejectedError("payload needs a string 'path' and a string 'content'")
        pure = PurePosixPath(path)
        if pure.is_absolute() or "\x00" in path:
            raise TargetRejectedError(f"path {path!r} must be relative to {self.root}")
        resolved = (self.root / pure).resolve()  # follows symlinks: they cannot lead outside
        try:
            relative = resolved.relative_to(self.root)
        except ValueError:
            raise TargetRejectedError(f"path {path!r} escapes {self.root}") from None
        if not relative.parts or relative.parts[0] == MANIFEST_DIR:
            raise TargetRejectedError(f"path {path!r} is not a content file")
        if resolved.is_dir():
            raise TargetRejectedError(f"path {path!r} is a directory")
        return relative.as_posix(), resolved, content.encode("utf-8")

    @staticmethod
    def _ref(manifest: dict[str, Any]) -> str:
        return f"{manifest['path']}@{str(manifest['content_sha256'])[:12]}"

    def _read_manifest(self, effect_key: str) -> dict[str, Any] | None:
        """The manifest, None if absent; ValueError if present but unreadable."""
        try:
            raw = self.manifest_path(effect_key).read_bytes()
        except FileNotFoundError:
            return None
        manifest = json.loads(raw)
        required = ("key", "request_hash", "path", "content_sha256")
        if not isinstance(manifest, dict) or not all(
            isinstance(manifest.get(field), str) for field in required
        ):
            raise ValueError("manifest lacks key/request_hash/path/content_sha256")
        return manifest

    async def execute(
        self, effect_key: str, request_hash: str, payload: dict[str, Any]
    ) -> Committed:
        rel_path, target, data = self._validate(payload)
        try:
            return await asyncio.to_thread(
                self._execute_locked, effect_key, request_hash, rel_path, target, data
            )
        except LockTimeout as err:
            raise TargetTransientError(f"{self.name}: {err}") from err
        except OSError as err:
            # Before the manifest rename nothing counts as committed; a retry redoes the write.
            raise TargetTransientError(f"{self.name}: {err}") from err

    def _execute_locked(
        self, effect_key: str, request_hash: str, rel_path: str, target: Path, data: bytes
    ) -> Committed:
        with locked_sync(self.manifests / ".lock", self._lock_timeout_s):
            try:
                existing = self._read_manifest(effect_key)
            except ValueError as err:
                raise TargetConflictError(
                    f"{self.name}: manifest for {effect_key!r} is unreadable: {err}"
                ) from err
            if existing is not None:
                # The effect happened; never rewrite it (a later effect may own the path now).
                if existing["key"] != effect_key or existing["request_hash"] != request_hash:
                    raise TargetConflictError(
                        f"{self.name}: key {effect_key!r} is committed with request "
                        f"{existing['request_hash']}, not {request_hash}"
                    )
                return Committed(
                    self._ref(existing),
                    existing["request_hash"],
                    {"path": existing["path"], "created": False},
                )
            manifest = {
                "key": effect_key,
                "request_hash": request_hash,
                "path": rel_path,
                "content_sha256": _sha256(data),
                "committed_at_ns": time.time_ns(),
            }
            _atomic_write(target, data)
            _atomic_write(
                self.manifest_path(effect_key),
                json.dumps(manifest, sort_keys=True).encode(),
            )
        return Committed(self._ref(manifest), request_hash, {"path": rel_path, "created": True})

    async def reconcile(self, effect_key: str) -> Reconciliation:
        return await asyncio.to_thread(self._reconcile_sync, effect_key)

    def _reconcile_sync(self, effect_key: str) -> Reconciliation:
        try:
            manifest = self._read_manifest(effect_key)
        except (OSError, ValueError) as err:
            return Unknown(f"{self.name}: manifest for {effect_key!r} unreadable: {err}")
        if manifest is None:
            return NotCommitted()
        if manifest["key"] != effect_key:
            return Unknown(
                f"{self.name}: manifest {self.manifest_path(effect_key).name} is another key's"
            )
        committed = Committed(
            self._ref(manifest), manifest["request_hash"], {"path": manifest["path"]}
        )
        try:
            current = _sha256((self.root / manifest["path"]).read_bytes())
        except OSError:
            return Unknown(f"{self.name}: committed file {manifest['path']} is missing")
        if current == manifest["content_sha256"]:
            return committed
        superseding = self._superseded_by(manifest, current)
        if superseding is not None:
            return Committed(
                committed.external_ref,
                committed.request_hash,
                {"path": manifest["path"], "superseded_by": superseding},
            )
        return Unknown(f"{self.name}: {manifest['path']} no longer holds the committed content")

    def _superseded_by(self, manifest: dict[str, Any], current_sha: str) -> str | None:
        """The key of a later effect that put the file's current content there, if any.

        A newer effect on the same path (an article's next revision) explains a mismatch;
        anything else (an edit by hand, a deleted file) is for a human to judge.
        """
        since = manifest.get("committed_at_ns", 0)
        for candidate in self.manifests.glob("*.json"):
            try:
                other = json.loads(candidate.read_bytes())
            except (OSError, ValueError):
                continue
            if (
                isinstance(other, dict)
                and other.get("path") == manifest["path"]
                and other.get("content_sha256") == current_sha
                and isinstance(other.get("committed_at_ns"), int)
                and other["committed_at_ns"] >= since
            ):
                return str(other.get("key"))
        return None
