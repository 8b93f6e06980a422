"""`groundwork target serve`: the HTTP effect target, in the foreground.

The same service tests and benchmarks start as a subprocess; serving it by hand lets a user
point an `http` target at it, arm faults with curl and watch `/stats`.
"""

from __future__ import annotations

import errno
from pathlib import Path

import typer

from adapters.targets import http_service
from cli._common import console, fail, settings

target_app = typer.Typer(no_args_is_help=True, help="Effect targets for tests and demos.")


@target_app.callback()
def _group() -> None:
    """Effect targets for tests and demos."""
    # A callback keeps `target` a group even while `serve` is its only command.


@target_app.command("serve")
def serve(
    port: int = typer.Option(8099, "--port", "-p", help="Port to listen on; 0 picks a free one."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    db: Path | None = typer.Option(
        None,
        "--db",
        help="SQLite file of committed effects (default: $GROUNDWORK_HOME/target.sqlite).",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each request to stderr."),
) -> None:
    """Serve the idempotent HTTP effect target (POST /effects, GET /effects/KEY, /stats, /faults)."""
    db_path = db if db is not None else settings("WARNING").home / "target.sqlite"
    console.print(f"effects in {db_path}; Ctrl-C stops", highlight=False)
    try:
        http_service.main(host, port, db_path, verbose=verbose)
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            fail(f"port {port} is already in use; choose another with --port")
        fail(f"cannot serve on {host}:{port}: {err}")
