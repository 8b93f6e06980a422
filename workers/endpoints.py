"""Where Temporal and Postgres are: explicit GROUNDWORK_* settings, else the embedded stack's."""

from __future__ import annotations

import json
from dataclasses import dataclass

import psutil

from workers.settings import Settings


class NoStackError(RuntimeError):
    """Nothing to connect to: no external server configured and no embedded stack running."""


@dataclass(frozen=True)
class Endpoints:
    temporal_address: str
    database_url: str
    embedded: bool


def read_state(settings: Settings) -> dict[str, object] | None:
    """The embedded stack's state file, if the stack it describes is alive."""
    try:
        state = json.loads(settings.state_file.read_text())
    except (OSError, ValueError):
        return None
    pids = [state.get("temporal_pid"), state.get("worker_pid")]
    if not any(isinstance(pid, int) and psutil.pid_exists(pid) for pid in pids):
        return None
    return dict(state)


def resolve(settings: Settings) -> Endpoints:
    state = read_state(settings)
    temporal = settings.temporal_address or (str(state["temporal_address"]) if state else None)
    database = settings.database_url or (str(state["database_url"]) if state else None)
    if temporal is None or database is None:
        missing = "GROUNDWORK_TEMPORAL_ADDRESS" if temporal is None else "GROUNDWORK_DATABASE_URL"
        raise NoStackError(
            f"no embedded stack is running under {settings.home} and {missing} is not set; "
            "start one with `groundwork up --detach`"
        )
    return Endpoints(temporal, database, embedded=state is not None)
