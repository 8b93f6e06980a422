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


async def test_the_sandbox_runs_its_step_snippets_through_one_compile_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from temporalio.worker.workflow_sandbox import _runner

    from workers.worker import sandbox_runner
    from workflows.agent_run import AgentRunWorkflow

    # The sandbox must still call `exec` by its global name, or the cache is bypassed.
    assert "exec" in _runner._Instance._run_code.__code__.co_names
    compiles: list[str] = []
    real_compile = compile

    def counting(source: Any, *args: Any, **kwargs: Any) -> Any:
        compiles.append(source)
        return real_compile(source, *args, **kwargs)

    monkeypatch.setattr(code_cache, "_snippets", {})
    monkeypatch.setattr("builtins.compile", counting)
    runner = sandbox_runner()  # installs
    assert getattr(_runner, "exec") is code_cache._cached_exec  # noqa: B009 (not a builtin here)
    defn = workflow_defn(AgentRunWorkflow)
    runner.prepare_workflow(defn)  # builds a throwaway instance in a sandbox: real snippets
    snippets = [s for s in compiles if isinstance(s, str) and "__temporal" in s]
    assert snippets, "the sandbox ran no snippet through the cache"
    runner.prepare_workflow(defn)
    again = [s for s in compiles if isinstance(s, str) and "__temporal" in s]
    assert again == snippets  # the second sandbox compiled nothing


def test_a_cached_snippet_runs_as_exec_of_its_string_would() -> None:
    first: dict[str, Any] = {"x": 2}
    second: dict[str, Any] = {"x": 5}
    snippet = "y = x * 3\n"
    code_cache._cached_exec(snippet, first, first)
    code_cache._cached_exec(snippet, second, second)
    assert (first["y"], second["y"]) == (6, 15)
    assert code_cache._snippets[snippet] is code_cache._snippets[snippet]
    with pytest.raises(ZeroDivisionError):
        code_cache._cached_exec("1 / 0\n", {}, None)


def workflow_defn(cls: type) -> Any:
    from temporalio.workflow import _Definition

    return _Definition.must_from_class(cls)
