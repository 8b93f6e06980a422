"""Compile each module source once per worker process, without writing bytecode files.

Temporal's workflow sandbox re-imports a workflow's modules for every workflow run. Where no
bytecode is written (PYTHONDONTWRITEBYTECODE=1, as our Dockerfile and this CI set it, or a
read-only tree), every run compiled workflows/*.py from source again: ~10 % of the worker's
CPU per run in bench/run_overhead.py. Code objects are immutable, so one compiled object can
serve every re-import; the module body still runs afresh in each sandbox, which is what the
sandbox needs. A changed source (same path, other bytes) compiles again.
"""

from __future__ import annotations

import hashlib
import threading
from importlib.machinery import SourceFileLoader
from types import CodeType
from typing import Any

_compiled: dict[str, tuple[bytes, CodeType]] = {}
_lock = threading.Lock()
_original = SourceFileLoader.source_to_code


def _cached_source_to_code(self: Any, data: Any, path: Any, *, _optimize: int = -1) -> CodeType:
    if _optimize != -1 or not isinstance(path, str):
        return _original(self, data, path, _optimize=_optimize)
    digest = hashlib.blake2b(bytes(data), digest_size=16).digest()
    with _lock:
        hit = _compiled.get(path)
    if hit is not None and hit[0] == digest:
        return hit[1]
    code = _original(self, data, path)
    with _lock:
        _compiled[path] = (digest, code)
    return code


def install() -> None:
    """Idempotent; affects only this process's source imports that found no bytecode file."""
    SourceFileLoader.source_to_code = _cached_source_to_code  # type: ignore[method-assign]
