"""What every command shares: settings, one-line errors, the console."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer
from rich.console import Console

from definitions import catalog
from workers.endpoints import Endpoints, NoStackError, resolve
from workers.logs import configure_logging
from workers.settings import Settings

console = Console()
err_console = Console(stderr=True)


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
