"""Crash points for fault-injection tests: SIGKILL this worker at a named point, once.

Armed only by GROUNDWORK_CRASH_AT=<point> and GROUNDWORK_CRASH_MARKER=<file>; the marker
makes the crash happen once, so the restarted worker runs through. Inert otherwise.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

CRASH_POINTS = (
    "before_intent",
    "after_intent",
    "after_send",
    "after_target_commit",
    "after_settle",
)
SHARED_COMMIT = "after_shared_commit"
"""Not one dispatch's window but the ledger's: a statement carrying several dispatches'
claims and settles has committed, and none of its callers has its answer yet."""


@dataclass(frozen=True)
class CrashPlan:
    """The crash this process is armed for, read from its environment once per dispatch
    (an environment look-up per crash point was ~2 % of the ledger's CPU per effect)."""

    point: str | None = None
    marker: str | None = None

    def crash(self, name: str, detail: str = "") -> None:
        """SIGKILL here if armed for `name`; the marker records `name` (and `detail`)."""
        if self.point != name or not self.marker:
            return
        try:
            fd = os.open(Path(self.marker), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, f"{name} {detail}".strip().encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)

    def armed(self, name: str) -> bool:
        return self.point == name and self.marker is not None and not Path(self.marker).exists()


_INERT = CrashPlan()


def crash_plan() -> CrashPlan:
    point = os.environ.get("GROUNDWORK_CRASH_AT")
    if point is None:
        return _INERT
    return CrashPlan(point, os.environ.get("GROUNDWORK_CRASH_MARKER"))
