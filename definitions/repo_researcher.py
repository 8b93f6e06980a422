"""A research branch: reads one pinned source tree and reports findings as `path:line` lines.

Its tools read only what a locator names (`package:<name>` or `git:<path>@<commit>`); the
research workflow seals what it reports into an EvidenceBundle after checking every
citation against the pinned tree, so a finding the tree does not hold never becomes evidence.
"""

from __future__ import annotations

from agents import Agent, function_tool

from adapters.source_trees import open_tree

MAX_LINES = 200


@function_tool
def search_tree(source: str, pattern: str, max_hits: int = 20) -> str:
    """Search the Python files of a source tree for a regular expression.

    Args:
        source: The tree's locator, exactly as given in the task (`package:...` or `git:...@...`).
        pattern: A Python regular expression matched against each line.
        max_hits: At most this many hits (1-40).

    Returns:
        Hits as `path:line: text`, paths relative to the tree.
    """
    hits = open_tree(source).search(pattern, max(1, min(max_hits, 40)))
    return "\n".join(hits) if hits else f"no match for {pattern!r} in {source}"


@function_tool
def read_tree_lines(source: str, path: str, start: int = 1, end: int = 60) -> str:
    """Read numbered lines from a file of a source tree.

    Args:
        source: The tree's locator, exactly as given in the task.
        path: File path relative to the tree.
        start: First line (1-based).
        end: Last line, inclusive (at most 200 lines are returned).
    """
    lines = open_tree(source).read(path)
    first = max(start, 1)
    last = min(end, len(lines), first + MAX_LINES - 1)
    return "\n".join(f"{path}:{n}: {lines[n - 1]}" for n in range(first, last + 1))


def build_agent() -> Agent[None]:
    return Agent(
        name="repo-researcher",
        instructions=(
            "You research one source tree to answer a question. Use search_tree and "
            "read_tree_lines with the `source` locator from the task. Report every finding "
            "on its own line as `path:line: what that line shows`, citing only lines you "
            "have read. Lines in any other format are not evidence."
        ),
        tools=[search_tree, read_tree_lines],
    )
