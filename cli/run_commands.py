"""`groundwork run start | show | cancel | events`."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx2
import typer
from pydantic import ValidationError
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from ulid import ULID

from cli._common import console, endpoints, fail, load_agents, make_table, settings
from cli.progress import final_state, follow, status_style
from cli.trigger_client import TriggerClient, endpoint, unreachable
from contracts.run import RunSpec, workflow_id_for
from contracts.search_attributes import GW_STATUS
from workers.client import connect
from workers.run_client import start_run
from workers.settings import Settings

run_app = typer.Typer(no_args_is_help=True, help="Agent runs.")


def _validation_line(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "input"
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"invalid {where}: {message}"


async def _client(config: Settings) -> Client:
    found = endpoints(config)
    try:
        return await connect(found.temporal_address, config.temporal_namespace)
    except RuntimeError as err:
        fail(f"cannot reach Temporal at {found.temporal_address}: {err}")


def build_spec(
    agent: str,
    text: str,
    model: str | None,
    run_id: str | None,
    tenant: str,
    max_steps: int | None,
    max_tool_calls: int | None,
    max_tokens: int | None,
) -> RunSpec:
    budgets: dict[str, int] = {}
    if max_steps is not None:
        budgets["max_steps"] = max_steps
    if max_tool_calls is not None:
        budgets["max_tool_calls"] = max_tool_calls
    if max_tokens is not None:
        budgets["max_tokens"] = max_tokens
    try:
        return RunSpec.model_validate(
            {
                "run_id": run_id or str(ULID()),
                "release": {"agent": agent, "model_route": model or f"scripted:{agent}-demo"},
                "input": text,
                "tenant": tenant,
                "budgets": budgets,
            }
        )
    except ValidationError as err:
        fail(_validation_line(err), code=2)


@run_app.command("start")
def start(
    agent: str = typer.Option(..., "--agent", help="Agent name in the worker's catalog."),
    text: str = typer.Option(..., "--input", help="The task for the agent."),
    model: str | None = typer.Option(
        None, "--model", help="Model route; default scripted:<agent>-demo."
    ),
    run_id: str | None = typer.Option(None, "--run-id", help="Our run id (default: a new ULID)."),
    tenant: str = typer.Option("default", "--tenant"),
    max_steps: int | None = typer.Option(None, "--max-steps"),
    max_tool_calls: int | None = typer.Option(None, "--max-tool-calls"),
    max_tokens: int | None = typer.Option(None, "--max-tokens"),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Follow the run until it ends."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Start an agent Run (the same run_id twice gives the same run)."""
    config = settings("WARNING")
    load_agents(config)
    spec = build_spec(agent, text, model, run_id, tenant, max_steps, max_tool_calls, max_tokens)

    async def go() -> int:
        client = await _client(config)
        handle = await start_run(client, spec, config.task_queue)
        url = config.run_url(handle.id)
        if not wait:
            if as_json:
                console.print_json(
                    json.dumps({"run_id": spec.run_id, "workflow_id": handle.id, "url": url})
                )
            else:
                console.print(f"started run {spec.run_id}\n{url}", highlight=False)
            return 0
        if not as_json:
            console.print(
                f"run {spec.run_id} started ({spec.release.model_route})", highlight=False
            )
        result = await follow(handle, console if not as_json else console.__class__(quiet=True))
        state = await final_state(handle)
        if as_json:
            payload = (result.model_dump(mode="json") if result else {}) | {
                "state": state.model_dump(mode="json") if state else None,
                "url": url,
            }
            console.print_json(json.dumps(payload))
        else:
            if result and result.final_output:
                console.print(result.final_output, highlight=False, markup=False)
            console.print(url, highlight=False, soft_wrap=True)
        return 0 if result is not None else 1

    raise typer.Exit(asyncio.run(go()))


@run_app.command("show")
def show(
    run_id: str = typer.Argument(..., help="The run id (without the run- prefix)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Show a run's status, budgets used, last events and output."""
    config = settings("WARNING")

    async def go() -> None:
        client = await _client(config)
        handle = client.get_workflow_handle(workflow_id_for(run_id))
        try:
            description = await handle.describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                fail(f"no run {run_id!r}")
            raise
        state = await final_state(handle)
        if as_json:
            console.print_json(
                json.dumps(
                    {
                        "run_id": run_id,
                        "workflow_status": description.status.name if description.status else None,
                        "state": state.model_dump(mode="json") if state else None,
                        "url": config.run_url(handle.id),
                    }
                )
            )
            return
        table = make_table(title=f"run {run_id}", title_justify="left")
        temporal_status = description.status or WorkflowExecutionStatus.RUNNING
        if state is None:
            table.add_row("Temporal status", temporal_status.name)
            table.add_row("State", "(no worker answered the query; start one with groundwork up)")
        else:
            style = status_style(state.status)
            waiting = f" ({state.waiting_reason.value})" if state.waiting_reason else ""
            table.add_row("Status", f"[{style}]{state.status.value}[/{style}]{waiting}")
            if state.failure_reason:
                table.add_row("Failure", f"{state.failure_reason.value}: {state.failure_message}")
            table.add_row("Agent", state.agent)
            table.add_row("Tenant", state.tenant)
            b, u = state.budgets, state.usage
            table.add_row("Steps", f"{u.steps} / {b.max_steps}")
            table.add_row("Tool calls", f"{u.tool_calls} / {b.max_tool_calls}")
            table.add_row("Tokens", f"{u.tokens} / {b.max_tokens}")
            table.add_row("Transcript", state.transcript_ref or "-")
            events = "\n".join(
                f"{e.seq:>3} {e.at:%H:%M:%S} {e.type}" for e in state.last_events[-10:]
            )
            table.add_row("Last events", events)
            if state.final_output:
                table.add_row("Output", state.final_output)
        table.add_row("Web UI", config.run_url(handle.id))
        console.print(table)

    asyncio.run(go())


@run_app.command("cancel")
def cancel(run_id: str = typer.Argument(...)) -> None:
    """Request cancellation; the run ends CANCELLED at its next await."""
    config = settings("WARNING")

    async def go() -> None:
        client = await _client(config)
        handle = client.get_workflow_handle(workflow_id_for(run_id))
        try:
            # Temporal takes a cancel request for a closed workflow without complaint; saying
            # "requested" then would tell the user something is about to stop that has ended.
            description = await handle.describe()
            if description.status not in (None, WorkflowExecutionStatus.RUNNING):
                ended = description.typed_search_attributes.get(GW_STATUS) or (
                    description.status.name.capitalize()
                )
                fail(f"run {run_id} has ended ({ended}); nothing to cancel")
            await handle.cancel()
        except RPCError as err:
            fail(f"cannot cancel run {run_id!r}: {err.message}")
        console.print(f"cancellation requested for run {run_id}")

    asyncio.run(go())


def _event_line(event: dict[str, Any]) -> str:
    key = f" {event['effect_key']}" if event.get("effect_key") else ""
    data = json.dumps(event.get("data") or {}, sort_keys=True)
    return f"{event['cursor']:>6} {event['at']} {event['type']}{key} {data}"


@run_app.command("events")
def events(
    run_id: str = typer.Argument(..., help="The run id (without the run- prefix)."),
    after: int = typer.Option(0, "--after", help="Only events after this cursor."),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Stream new events until the run ends (SSE, resumes)."
    ),
    retry_for_s: float = typer.Option(
        60.0, "--retry-for-s", help="With --follow: how long to keep reconnecting."
    ),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per event."),
) -> None:
    """A run's events through the trigger service (GET /v1/runs/{id}/events); with --follow a
    live stream that reconnects after a drop and resumes after the last event seen."""
    config = settings("WARNING")
    client = TriggerClient(endpoint(config))
    path = f"/v1/runs/{run_id}/events"

    def emit(event: dict[str, Any]) -> None:
        typer.echo(json.dumps(event, sort_keys=True) if as_json else _event_line(event))

    try:
        if not follow:
            cursor = after
            while True:
                page = client.request("GET", path, params={"after": cursor, "limit": 1000}).json()
                for event in page["events"]:
                    emit(event)
                if not page["events"]:
                    return
                cursor = page["next_cursor"]
        last: int | None = None
        failing_since: float | None = None
        backoff = 0.2
        while True:
            try:
                for event_id, kind, data in client.stream_events(path, last, after):
                    failing_since, backoff = None, 0.2
                    if kind == "end":
                        return
                    if event_id is not None and last is not None and event_id <= last:
                        continue  # never print an event twice
                    emit(data)
                    if event_id is not None:
                        last = event_id
            except httpx2.HTTPError as err:
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > retry_for_s:
                    unreachable(client.where, err)
            time.sleep(backoff)  # dropped (or closed early): reconnect after the last event
            backoff = min(backoff * 2, 2.0)
    finally:
        client.close()
