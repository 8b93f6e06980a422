"""Compile each module source once per worker process, without writing bytecode files.

Temporal's workflow sandbox re-imports a workflow's modules for every workflow run. Where no
bytecode is written (PYTHONDONTWRITEBYTECODE=1, as our Dockerfile and this CI set it, or a
read-only tree), every run compiled workflows/*.py from source again: ~10 % of the worker's
CPU per run in bench/run_overhead.py. Code objects are immutable, so one compiled object can
serve every re-import; the module body still runs afresh in each sandbox, which is what the
sandbox needs. A changed source (same path, other bytes) compiles again.

The sandbox also runs each step it takes inside a workflow (create the instance, activate
it, and for every payload it encodes or decodes, look up the payload's serialization
context) as `exec` of a short source string, which compiled that string every time: ~46 µs
a compile on a 2-core VM, six payload passes per workflow task, ~6 % of the worker's CPU
under the e2e load of bench/effects.py (py-spy, bench/RESULTS.md). The handful of distinct
strings are compiled once here and the code object is executed with the globals the sandbox
passes, which is what `exec` of the string does.
"""

from __future__ import annotations
import __future__

import hashlib
import threading
from importlib.machinery import SourceFileLoader
from types import CodeType
from typing import Any

from temporalio.worker.workflow_sandbox import _runner

_compiled: dict[str, tuple[bytes, CodeType]] = {}
_lock = threading.Lock()
_original = SourceFileLoader.source_to_code
_snippets: dict[str, CodeType] = {}
# The sandbox's step snippets name the workflow module and class, so a worker holds a few per
# workflow type; past this many distinct strings, new ones are compiled and not kept.
_MAX_SNIPPETS = 256


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


def _runner_flags() -> int:
    flags = 0
    for value in vars(_runner).values():
        if isinstance(value, __future__._Feature):
            flags |= value.compiler_flag
    return flags


def _cached_exec(source: str | CodeType, globals_: dict[str, Any], locals_: Any = None, /) -> None:
    if not isinstance(source, str):
        exec(source, globals_, locals_)
        return
    code = _snippets.get(source)
    if code is None:
        # As `exec` of a string in _runner compiles it: with that module's __future__ flags.
        code = compile(source, "<string>", "exec", flags=_runner_flags(), dont_inherit=True)
        with _lock:
            if len(_snippets) < _MAX_SNIPPETS:
                _snippets[source] = code
    exec(code, globals_, locals_)


def install() -> None:
    """Idempotent; affects only this process's source imports that found no bytecode file,
    and the workflow sandbox's own `exec` calls."""
    SourceFileLoader.source_to_code = _cached_source_to_code  # type: ignore[method-assign]
    # temporalio pinned in pyproject.toml; _runner calls the name `exec` from its module
    # globals, so this shadows the builtin for that module only (tests/unit/test_code_cache.py
    # fails if the sandbox stops going through it).
    _runner.exec = _cached_exec  # type: ignore[attr-defined]
