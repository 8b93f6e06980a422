"""`groundwork up | down | status | worker | db migrate`."""

from __future__ import annotations

import asyncio
import signal
import time

import typer

from adapters.migrate import migrate
from cli._common import console, endpoints, fail, load_agents, make_table, settings
from workers.settings import Settings
from workers.stack import (
    StackError,
    StackState,
    running_stack,
    stack_alive,
    start_stack,
    stop_stack,
)
from workers.worker import run_worker

db_app = typer.Typer(no_args_is_help=True, help="The ledger database.")


def _show(state: StackState, config: Settings, title: str) -> None:
    table = make_table(title=title, title_justify="left")
    table.add_row("Temporal", state.temporal_address)
    table.add_row("Web UI", state.ui_url or "(external Temporal: its own UI)")
    table.add_row("Postgres", state.database_url)
    table.add_row("Worker", f"pid {state.worker_pid}, task queue {config.task_queue}")
    table.add_row("Trigger API", f"{state.trigger_url}/docs" if state.trigger_url else "-")
    table.add_row("Logs", str(config.home / "logs"))
    console.print(table)


def ensure_stack(config: Settings) -> StackState:
    """The running stack, or a new one started in the background."""
    state = running_stack(config)
    if state is not None:
        return state
    try:
        return start_stack(config)
    except StackError as err:
        fail(str(err))


def up(
    detach: bool = typer.Option(
        False, "--detach", "-d", help="Start in the background and return."
    ),
) -> None:
    """Start the embedded stack: Temporal + Web UI, Postgres (migrated), a worker, the trigger service."""
    config = settings("WARNING")
    load_agents(config)  # a wrong GROUNDWORK_AGENTS fails here, not in the worker's log
    existing = running_stack(config)
    if existing is not None:
        _show(existing, config, "Groundwork stack already running")
        console.print("Stop it with [bold]groundwork down[/bold].")
        return
    stopping = False

    def _stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    if not detach:
        # Installed before starting, so a Ctrl-C during start-up still stops what started.
        signal.signal(signal.SIGINT, _stop)
        signal.signal(signal.SIGTERM, _stop)
    with console.status("starting Temporal, Postgres, a worker and the trigger service…"):
        state = ensure_stack(config)
    _show(state, config, "Groundwork stack up")
    if detach:
        console.print("Running in the background; stop it with [bold]groundwork down[/bold].")
        return
    console.print("Press Ctrl-C to stop.")
    while not stopping:
        dead = stack_alive(state)
        if dead:
            console.print(f"[red]{', '.join(dead)} exited[/red]; see {config.home / 'logs'}")
            break
        time.sleep(0.5)
    with console.status("stopping…"):
        stop_stack(config, state)
    console.print("Stack stopped.")


def down() -> None:
    """Stop a stack started with `groundwork up --detach` (or by `groundwork demo`)."""
    config = settings("WARNING")
    state = running_stack(config)
    if state is None:
        console.print(f"No Groundwork stack is running under {config.home}.")
        return
    with console.status("stopping…"):
        stop_stack(config, state)
    console.print("Stack stopped.")


def status() -> None:
    """Show the embedded stack, if one is running."""
    config = settings("WARNING")
    state = running_stack(config)
    if state is None:
        fail(f"no Groundwork stack is running under {config.home}")
    _show(state, config, "Groundwork stack")


def worker() -> None:
    """Run a worker in the foreground (the embedded stack starts one; deployments run N)."""
    config = settings()
    load_agents(config)
    found = endpoints(config)
    asyncio.run(run_worker(config, found.temporal_address, found.database_url))


def serve(
    port: int | None = typer.Option(
        None, "--port", help="Default GROUNDWORK_TRIGGER_PORT or 8080."
    ),
    host: str | None = typer.Option(None, "--host"),
) -> None:
    """Run the HTTP trigger service: POST /v1/inputs, the run read API, controls; docs at /docs."""
    from trigger.config import TriggerSettings
    from trigger.serve import serve as run_service

    config = settings()
    load_agents(config)
    try:
        trigger = TriggerSettings()
    except Exception as err:
        fail(f"invalid GROUNDWORK_TRIGGER_* configuration: {err}".replace("\n", " "))
    if port is not None:
        trigger.port = port
    if host is not None:
        trigger.host = host
    found = endpoints(config)
    asyncio.run(run_service(config, trigger, found.temporal_address, found.database_url))


@db_app.command("migrate")
def db_migrate() -> None:
    """Apply the ledger's SQL migrations (idempotent)."""
    config = settings("WARNING")
    found = endpoints(config)
    applied = asyncio.run(migrate(found.database_url))
    if applied:
        for migration in applied:
            console.print(f"applied {migration.version:04d}_{migration.name}")
    else:
        console.print("database is up to date")
