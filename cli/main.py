"""`groundwork`: the one console script."""

from __future__ import annotations

import typer

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Durable agent runs on Temporal."
)


@app.callback()
def _root() -> None:
    """Durable agent runs: Temporal workflows, a Postgres ledger, approvals and inputs."""


def main() -> None:
    app()
