"""What every command shares: settings, one-line errors, the console."""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from definitions import catalog
from workers.endpoints import Endpoints, NoStackError, resolve
from workers.logs import configure_logging
from workers.settings import Settings


def _console(stderr: bool = False) -> Console:
    # Rich renders at 80 columns when its stream is not a terminal (a pipe to grep, a log
    # file), which squeezed effect keys and run ids out of the tables that are the input
    # to the next command; there COLUMNS, if set, still decides.
    stream = sys.stderr if stderr else sys.stdout
    piped = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stderr, width=200 if piped else None)


console = _console()
err_console = _console(stderr=True)


def make_table(*headers: str, **options: Any) -> Table:
    """A table whose cells wrap rather than end in an ellipsis: a key, id or hash in it is
    always whole, however narrow the terminal. Without headers: two columns, name and value."""
    out = Table(show_header=bool(headers), **options)
    for header in headers or ("", ""):
        out.add_column(header, overflow="fold")
    return out


def fail(message: str, code: int = 1) -> NoReturn:
    """Bad input or an unusable environment: one line on stderr, a non-zero exit."""
    err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def settings(log_level: str | None = None) -> Settings:
    """Read GROUNDWORK_*; interactive commands log warnings only, services log at log_level."""
    try:
        config = Settings()
    except Exception as err:  # pydantic ValidationError: name the variable
        fail(f"invalid GROUNDWORK_* configuration: {err}".replace("\n", " "))
    configure_logging(log_level or config.log_level, stream=sys.stderr)
    return config


def endpoints(config: Settings) -> Endpoints:
    try:
        return resolve(config)
    except NoStackError as err:
        fail(str(err))


def load_agents(config: Settings) -> None:
    """Add GROUNDWORK_AGENTS to the catalog, each checked as a run would govern it."""
    if not config.agents:
        return
    from workflows._tool_gateway import UngovernableToolError, govern

    async def _never(*_: object) -> str:
        raise AssertionError("a catalog check never calls a tool")

    try:
        for name in catalog.load(config.agents):
            govern(catalog.build(name), _never)
    except (catalog.AgentLoadError, UngovernableToolError) as err:
        fail(f"GROUNDWORK_AGENTS: {err}")
