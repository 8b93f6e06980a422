"""`groundwork`: the one console script."""

from __future__ import annotations

import os
import sys

import typer

from cli.agent_commands import agent_app
from cli.approval_commands import approval_app, approve, reject
from cli.demo import demo
from cli.effect_commands import effect_app
from cli.input_commands import input_app
from cli.run_commands import run_app
from cli.stack_commands import db_app, down, serve, status, up, worker
from cli.target_commands import target_app

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Durable agent runs: Temporal workflows, a Postgres ledger, approvals and inputs.",
)
app.command()(up)
app.command()(down)
app.command()(status)
app.command()(worker)
app.command()(serve)
app.command()(demo)
app.command()(approve)
app.command()(reject)
app.add_typer(run_app, name="run")
app.add_typer(db_app, name="db")
app.add_typer(effect_app, name="effect")
app.add_typer(approval_app, name="approval")
app.add_typer(input_app, name="input")
app.add_typer(target_app, name="target")
app.add_typer(agent_app, name="agent")


def main() -> None:
    code = 0
    try:
        app()
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    # Every command has finished its work here. Temporal's client runtime keeps native threads
    # that can call into a finalizing interpreter (seen: "PyGILState_Release ... finalizing",
    # exit -6 after a successful `approve`), so skip finalization once output is flushed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
