"""The worker's in-memory code cache: one compile per source, a changed source recompiles."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import CodeType
from typing import Any

import pytest

from workers import code_cache


def test_a_reimported_module_is_compiled_once_and_a_changed_one_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiles: list[str] = []
    original = code_cache._original

    def counting(self: Any, data: Any, path: Any, *, _optimize: int = -1) -> CodeType:
        compiles.append(str(path))
        return original(self, data, path, _optimize=_optimize)

    monkeypatch.setattr(code_cache, "_original", counting)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # as under PYTHONDONTWRITEBYTECODE=1
    monkeypatch.syspath_prepend(str(tmp_path))
    source = tmp_path / "gw_code_cache_probe.py"
    source.write_text("VALUE = 1\n")
    code_cache.install()

    def fresh_import() -> Any:
        sys.modules.pop("gw_code_cache_probe", None)
        importlib.invalidate_caches()
        return importlib.import_module("gw_code_cache_probe")

    try:
        assert fresh_import().VALUE == 1
        assert fresh_import().VALUE == 1  # the sandbox's re-import: module body runs again
        assert compiles == [str(source)]
        source.write_text("VALUE = 2\n")
        assert fresh_import().VALUE == 2
        assert compiles == [str(source), str(source)]
    finally:
        sys.modules.pop("gw_code_cache_probe", None)
    assert not (tmp_path / "__pycache__").exists()  # nothing written to disk
