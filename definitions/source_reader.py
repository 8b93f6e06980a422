"""A read-only research agent over the installed source of a Python package."""

from __future__ import annotations

import re
from pathlib import Path

from agents import Agent, function_tool

from adapters.source_trees import SourceTreeError, package_root

MAX_HITS = 40
MAX_LINES = 200


# One definition of "an installed package's tree" for the reader and the research branches.
SourceAccessError = SourceTreeError


def _inside(root: Path, relative: str) -> Path:
    target = (root / relative).resolve()
    if root != target and root not in target.parents:
        raise SourceAccessError(f"path {relative!r} is outside package {root.name}")
    if not target.is_file():
        raise SourceAccessError(f"no file {relative!r} in package {root.name}")
    return target


@function_tool
def search_source(package: str, pattern: str) -> str:
    """Search the Python files of an installed package for a regular expression.

    Args:
        package: The importable package name, e.g. "temporalio".
        pattern: A Python regular expression matched against each line.

    Returns:
        Up to 40 hits as `path:line: text`, paths relative to the package.
    """
    root = package_root(package)
    regex = re.compile(pattern)
    hits: list[str] = []
    for path in sorted(root.rglob("*.py")):
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            if regex.search(line):
                hits.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
                if len(hits) >= MAX_HITS:
                    return "\n".join(hits)
    return "\n".join(hits) if hits else f"no match for {pattern!r} in {package}"


@function_tool
def read_definition(package: str, path: str, name: str) -> str:
    """Read the source of a top-level class or function in a file of an installed package.

    Args:
        package: The importable package name, e.g. "temporalio".
        path: File path relative to the package, e.g. "common.py".
        name: The class or function name.

    Returns:
        The definition's lines, each prefixed with `path:line`.
    """
    target = _inside(package_root(package), path)
    lines = target.read_text(errors="replace").splitlines()
    start = next(
        (
            i
            for i, line in enumerate(lines)
            if re.match(rf"(class|def|async def)\s+{re.escape(name)}\b", line)
        ),
        None,
    )
    if start is None:
        raise SourceAccessError(f"no top-level definition {name!r} in {path}")
    end = start + 1
    while end < len(lines) and end - start < MAX_LINES:
        line = lines[end]
        if line and not line[0].isspace() and not line.startswith((")", "#")):
            break
        end += 1
    return "\n".join(f"{path}:{n + 1}: {lines[n]}" for n in range(start, end))


@function_tool
def read_lines(package: str, path: str, start: int = 1, end: int = 60) -> str:
    """Read numbered lines from a file of an installed package.

    Args:
        package: The importable package name.
        path: File path relative to the package.
        start: First line (1-based).
        end: Last line, inclusive (at most 200 lines are returned).
    """
    target = _inside(package_root(package), path)
    lines = target.read_text(errors="replace").splitlines()
    first = max(start, 1)
    last = min(end, len(lines), first + MAX_LINES - 1)
    return "\n".join(f"{path}:{n}: {lines[n - 1]}" for n in range(first, last + 1))


def build_agent() -> Agent[None]:
    return Agent(
        name="source-reader",
        instructions=(
            "You answer questions about Python libraries by reading their installed source. "
            "Search first, then read the definition, and cite every fact as path:line."
        ),
        tools=[search_source, read_definition, read_lines],
    )
