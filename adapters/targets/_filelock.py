"""An inter-process exclusive lock on a file (fcntl.flock), usable from async and sync code.

Targets are called by many workers, in many processes and, within a process, by many
coroutines at once. `flock` locks belong to an open file description, so two opens of the
lock file exclude each other even inside one process. The lock is taken non-blocking and
polled: a blocking `flock` would freeze the event loop (or, run in a thread, keep waiting
after its caller was cancelled and then hold the lock forever).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

_POLL_S = 0.005
_MAX_POLL_S = 0.05


class LockTimeout(Exception):
    """The lock stayed held by someone else for longer than the caller would wait."""


def _open(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@asynccontextmanager
async def locked(path: Path, timeout_s: float) -> AsyncIterator[None]:
    """Hold the exclusive lock on `path` for the block; raise LockTimeout if not acquired."""
    fd = _open(path)
    try:
        deadline = time.monotonic() + timeout_s
        delay = _POLL_S
        while not _try_lock(fd):
            if time.monotonic() >= deadline:
                raise LockTimeout(f"lock {path} still held after {timeout_s:g} s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_POLL_S)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the flock


@contextmanager
def locked_sync(path: Path, timeout_s: float) -> Iterator[None]:
    """The same lock for code running in a worker thread."""
    fd = _open(path)
    try:
        deadline = time.monotonic() + timeout_s
        delay = _POLL_S
        while not _try_lock(fd):
            if time.monotonic() >= deadline:
                raise LockTimeout(f"lock {path} still held after {timeout_s:g} s")
            time.sleep(delay)
            delay = min(delay * 2, _MAX_POLL_S)
        yield
    finally:
        os.close(fd)
