"""Crash points for fault-injection tests: SIGKILL this worker at a named point, once.

Armed only by GROUNDWORK_CRASH_AT=<point> and GROUNDWORK_CRASH_MARKER=<file>; the marker
makes the crash happen once, so the restarted worker runs through. Inert otherwise.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

CRASH_POINTS = (
    "before_intent",
    "after_intent",
    "after_send",
    "after_target_commit",
    "after_settle",
)


def crash_point(name: str) -> None:
    if os.environ.get("GROUNDWORK_CRASH_AT") != name:
        return
    marker = os.environ.get("GROUNDWORK_CRASH_MARKER")
    if not marker:
        return
    path = Path(marker)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, name.encode())
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def armed(name: str) -> bool:
    marker = os.environ.get("GROUNDWORK_CRASH_MARKER")
    return (
        os.environ.get("GROUNDWORK_CRASH_AT") == name
        and marker is not None
        and not Path(marker).exists()
    )
