"""`GitRepoTarget`: publish a file into a local git repository (a docs site, a content repo).

Each effect is one commit plus one annotated tag named after the effect key; the tag is
the receipt and reconciliation is a tag lookup. Writers serialize on an flock in the git
dir, so workers in other processes never interleave a write/add/commit/tag sequence.

A crash between `git commit` and `git tag` would leave an untagged commit; a plain retry
would then commit the same content a second time. So the commit message carries the
effect key, and `execute` adopts such an orphan commit (tags it) instead of committing
again. Reconcile reports the orphan as NotCommitted, which stays safe: the dispatch that
follows adopts it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from adapters.targets._filelock import LockTimeout, locked
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

AUTHOR_NAME = "Groundwork"
AUTHOR_EMAIL = "groundwork@localhost"
TAG_NAMESPACE = "gw"
_ID_TRAILER = "Groundwork-Effect-Id"
_RECORD_TRAILER = "Groundwork-Effect"
# Signing would need keys a worker does not have; the ledger's record is the tag itself.
_GIT_CONFIG = (
    "-c",
    "commit.gpgSign=false",
    "-c",
    "tag.gpgSign=false",
    "-c",
    "core.quotePath=false",
)


def git_env() -> dict[str, str]:
    """Never prompt, and commit/tag under one fixed identity whatever the host's config."""
    env = dict(os.environ)
    env.update(
        GIT_TERMINAL_PROMPT="0",
        GIT_AUTHOR_NAME=AUTHOR_NAME,
        GIT_AUTHOR_EMAIL=AUTHOR_EMAIL,
        GIT_COMMITTER_NAME=AUTHOR_NAME,
        GIT_COMMITTER_EMAIL=AUTHOR_EMAIL,
        LC_ALL="C",
    )
    return env


def tag_name(effect_key: str) -> str:
    """A valid, unique ref name for the key: `gw/<readable prefix>-<12 hex of sha256(key)>`.

    The prefix keeps tags recognisable in `git tag -l`; the digest keeps them unique when
    sanitizing maps two keys to one prefix. The full key lives in the tag message.
    """
    digest = hashlib.sha256(effect_key.encode()).hexdigest()[:12]
    prefix = re.sub(r"[^A-Za-z0-9._-]+", "-", effect_key)
    prefix = re.sub(r"\.{2,}", ".", prefix).strip(".-")[:48].strip(".-")
    return f"{TAG_NAMESPACE}/{prefix}-{digest}" if prefix else f"{TAG_NAMESPACE}/{digest}"


def _effect_id(effect_key: str) -> str:
    return hashlib.sha256(effect_key.encode()).hexdigest()


class GitError(Exception):
    """A git command exited non-zero."""

    def __init__(self, args: tuple[str, ...], returncode: int, stderr: str) -> None:
        super().__init__(f"git {' '.join(args)} exited {returncode}: {stderr.strip()[:500]}")
        self.returncode = returncode
        self.stderr = stderr


def init_repo(path: str | Path, branch: str = "main") -> Path:
    """Create a repository with an initial commit at `path` unless one is already there."""
    repo = Path(path)
    repo.mkdir(parents=True, exist_ok=True)
    env = git_env()

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", str(repo), *_GIT_CONFIG, *args],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )

    inside = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--show-toplevel"],
        env=env,
        capture_output=True,
        text=True,
    )
    if inside.returncode != 0 or Path(inside.stdout.strip()).resolve() != repo.resolve():
        git("init", "-q", "-b", branch)
    if not _has_head(repo, env):
        git("commit", "-q", "--allow-empty", "-m", "Initialize repository")
    return repo


def _has_head(repo: Path, env: dict[str, str]) -> bool:
    found = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "-q", "--verify", "HEAD"],
        env=env,
        capture_output=True,
    )
    return found.returncode == 0


@dataclass(frozen=True)
class _Tagged:
    commit: str
    record: dict[str, Any] | None


class GitRepoTarget(EffectTarget):
    """Payload `{"path": "articles/x.md", "content": "...", "message": "..."}` (message optional)."""

    def __init__(
        self, repo: str | Path, *, name: str = "git", lock_timeout_s: float = 60.0
    ) -> None:
        self.name = name
        self.repo = Path(repo).resolve()
        self._lock_timeout_s = lock_timeout_s
        self._env = git_env()
        self._git_dir: Path | None = None

    # -- git plumbing -----------------------------------------------------------------

    async def _git(self, *args: str, check: bool = True) -> str:
        try:
            proc = await asyncio.create_subprocess_exec(
                "git",
                "-C",
                str(self.repo),
                *_GIT_CONFIG,
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env,
            )
        except FileNotFoundError as missing:
            raise GitError(args, 127, "git executable not found") from missing
        try:
            out, err = await proc.communicate()
        except asyncio.CancelledError:
            # Let git finish rather than leave an index.lock that fails every later attempt.
            try:
                await asyncio.wait_for(proc.wait(), 30)
            finally:
                if proc.returncode is None:
                    proc.kill()
            raise
        if check and proc.returncode != 0:
            raise GitError(args, proc.returncode or 0, err.decode(errors="replace"))
        return out.decode(errors="replace")

    async def _lock_path(self) -> Path:
        if self._git_dir is None:
            self._git_dir = Path((await self._git("rev-parse", "--absolute-git-dir")).strip())
        return self._git_dir / "groundwork-effects.lock"

    async def _read_tag(self, tag: str) -> _Tagged | None:
        """The tag's commit and recorded effect, or None when the tag does not exist."""
        out = await self._git(
            "for-each-ref",
            "--format=%(objecttype)%00%(*objectname)%00%(objectname)%00%(contents)",
            f"refs/tags/{tag}",
        )
        if not out.strip():
            return None
        kind, peeled, direct, contents = [*out.split("\x00", 3), "", "", ""][:4]
        # An annotated tag peels to its commit; a lightweight one points at it directly.
        return _Tagged(peeled or direct, _parse_record(contents) if kind == "tag" else None)

    async def _find_orphan(self, effect_key: str) -> tuple[str, dict[str, Any]] | None:
        """A commit for this key left untagged by a crash, searched through HEAD's history."""
        head = await self._git("rev-parse", "-q", "--verify", "HEAD", check=False)
        if not head.strip():
            return None
        out = await self._git(
            "log",
            "-F",
            f"--grep={_ID_TRAILER}: {_effect_id(effect_key)}",
            "--format=%H%x00%B%x1e",
            "HEAD",
        )
        for entry in out.split("\x1e"):
            commit, _, message = entry.strip().partition("\x00")
            record = _parse_record(message)
            if commit and record is not None and record.get("effect_key") == effect_key:
                return commit, record
        return None

    # -- payload ----------------------------------------------------------------------

    def _validate(self, payload: dict[str, Any]) -> tuple[str, str, str]:
        path, content = payload.get("path"), payload.get("content")
        message = payload.get("message")
        if not isinstance(path, str) or not path or not isinstance(content, str):
            raise TargetRejectedError("payload needs a string 'path' and a string 'content'")
        if message is not None and not isinstance(message, str):
            raise TargetRejectedError("payload 'message' must be a string")
        pure = PurePosixPath(path)
        if pure.is_absolute() or "\x00" in path:
            raise TargetRejectedError(f"path {path!r} must be relative to the repository")
        resolved = (self.repo / pure).resolve()
        try:
            relative = resolved.relative_to(self.repo)
        except ValueError:
            raise TargetRejectedError(f"path {path!r} escapes the repository") from None
        if not relative.parts or relative.parts[0] == ".git":
            raise TargetRejectedError(f"path {path!r} is not a file in the work tree")
        if resolved.is_dir():
            raise TargetRejectedError(f"path {path!r} is a directory")
        return relative.as_posix(), content, message or f"Publish {relative.as_posix()}"

    # -- the contract -----------------------------------------------------------------

    async def execute(
        self, effect_key: str, request_hash: str, payload: dict[str, Any]
    ) -> Committed:
        rel_path, content, message = self._validate(payload)
        tag = tag_name(effect_key)
        record = {"effect_key": effect_key, "request_hash": request_hash, "path": rel_path}
        try:
            async with locked(await self._lock_path(), self._lock_timeout_s):
                existing = await self._read_tag(tag)
                if existing is not None:
                    return self._settled(effect_key, request_hash, tag, existing)
                orphan = await self._find_orphan(effect_key)
                if orphan is not None:
                    commit, recorded = orphan
                    self._check_same(effect_key, request_hash, recorded)
                else:
                    commit = await self._commit(effect_key, rel_path, content, message, record)
                await self._git(
                    "tag",
                    "-a",
                    "--cleanup=verbatim",
                    "-m",
                    _record_message(f"groundwork effect {tag}", record),
                    tag,
                    commit,
                )
        except LockTimeout as err:
            raise TargetTransientError(f"{self.name}: {err}") from err
        except GitError as err:
            # Nothing is tagged yet, and a retry adopts any commit already made: safe to retry.
            raise TargetTransientError(f"{self.name}: {err}") from err
        return Committed(
            external_ref=f"{tag}@{commit}",
            request_hash=request_hash,
            details={"tag": tag, "commit": commit, "path": rel_path, "created": orphan is None},
        )

    async def _commit(
        self, effect_key: str, rel_path: str, content: str, message: str, record: dict[str, Any]
    ) -> str:
        target = self.repo / rel_path
        await asyncio.to_thread(_write_text, target, content)
        await self._git("add", "-f", "--", rel_path)
        body = f"{message.rstrip()}\n\n{_ID_TRAILER}: {_effect_id(effect_key)}\n"
        # `-- path` commits only this path: leftovers staged by a crashed attempt stay out.
        await self._git(
            "commit",
            "-q",
            "--allow-empty",
            "--cleanup=verbatim",
            "-m",
            body + f"{_RECORD_TRAILER}: {json.dumps(record, sort_keys=True)}\n",
            "--",
            rel_path,
        )
        return (await self._git("rev-parse", "HEAD")).strip()

    def _settled(self, effect_key: str, request_hash: str, tag: str, tagged: _Tagged) -> Committed:
        if tagged.record is None:
            raise TargetConflictError(
                f"{self.name}: tag {tag} exists but is not a Groundwork receipt"
            )
        self._check_same(effect_key, request_hash, tagged.record)
        return Committed(
            external_ref=f"{tag}@{tagged.commit}",
            request_hash=request_hash,
            details={
                "tag": tag,
                "commit": tagged.commit,
                "path": tagged.record.get("path"),
                "created": False,
            },
        )

    def _check_same(self, effect_key: str, request_hash: str, record: dict[str, Any]) -> None:
        if record.get("effect_key") != effect_key:
            raise TargetConflictError(
                f"{self.name}: tag for {effect_key!r} holds key {record.get('effect_key')!r}"
            )
        if record.get("request_hash") != request_hash:
            raise TargetConflictError(
                f"{self.name}: key {effect_key!r} is committed with request "
                f"{record.get('request_hash')}, not {request_hash}"
            )

    async def read_published(self, commit: str, path: str) -> str | None:
        """The file as committed at `commit` (filters applied on add included), or None."""
        try:
            return await self._git("show", f"{commit}:{path}")
        except GitError:
            return None

    async def reconcile(self, effect_key: str) -> Reconciliation:
        tag = tag_name(effect_key)
        try:
            tagged = await self._read_tag(tag)
        except GitError as err:
            return Unknown(f"{self.name}: {err}")
        if tagged is None:
            return NotCommitted()
        if tagged.record is None or tagged.record.get("effect_key") != effect_key:
            return Unknown(f"{self.name}: tag {tag} exists but does not record key {effect_key!r}")
        recorded = tagged.record.get("request_hash")
        return Committed(
            external_ref=f"{tag}@{tagged.commit}",
            request_hash=recorded if isinstance(recorded, str) else None,
            details={"tag": tag, "commit": tagged.commit, "path": tagged.record.get("path")},
        )


def _record_message(title: str, record: dict[str, Any]) -> str:
    """Tag message: a title line, then the record as one JSON line (JSON escapes newlines)."""
    return f"{title}\n\n{_RECORD_TRAILER}: {json.dumps(record, sort_keys=True)}\n"


def _parse_record(message: str) -> dict[str, Any] | None:
    """The last record line wins: a user's commit message above it cannot spoof it."""
    prefix = f"{_RECORD_TRAILER}: "
    for line in reversed(message.splitlines()):
        if line.startswith(prefix):
            try:
                record = json.loads(line[len(prefix) :])
            except ValueError:
                return None
            return record if isinstance(record, dict) else None
    return None


def _write_text(target: Path, content: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")
