"""`groundwork demo`: one durable agent run over real installed source, end to end."""

from __future__ import annotations

import asyncio

import typer
from ulid import ULID

from cli._common import console, fail, settings
from cli.progress import follow
from cli.stack_commands import ensure_stack
from contracts.run import Release, RunSpec
from workers.client import connect
from workers.run_client import start_run

DEMO_QUESTION = (
    "Where does the Temporal Python SDK define RetryPolicy, and what fields does it have? "
    "Cite path:line."
)


def demo(
    model: str = typer.Option(
        "scripted:source-reader-demo",
        "--model",
        help="Model route; openai:<model> uses OPENAI_API_KEY.",
    ),
) -> None:
    """Start the stack if needed and run the source-reader agent on a real question."""
    config = settings("WARNING")
    with console.status("starting the embedded stack (Temporal, Postgres, worker)…"):
        state = ensure_stack(config)
    spec = RunSpec(
        run_id=str(ULID()),
        release=Release(agent="source-reader", model_route=model, release_id="demo"),
        input=DEMO_QUESTION,
    )

    async def go() -> bool:
        client = await connect(state.temporal_address, config.temporal_namespace)
        handle = await start_run(client, spec, config.task_queue)
        console.print(f"[bold]run {spec.run_id}[/bold]: {DEMO_QUESTION}", highlight=False)
        result = await follow(handle, console)
        if result is None or result.final_output is None:
            console.print(f"[red]run did not complete[/red]; see groundwork run show {spec.run_id}")
            return False
        console.rule("answer")
        console.print(result.final_output, highlight=False, markup=False)
        console.rule()
        console.print(
            f"steps {result.usage.steps}, tool calls {result.usage.tool_calls}, "
            f"tokens {result.usage.tokens}"
        )
        console.print(f"Web UI: {config.run_url(handle.id)}", highlight=False, soft_wrap=True)
        return True

    ok = asyncio.run(go())
    console.print(
        "The stack keeps running so the run stays visible in the Web UI; "
        "[bold]groundwork down[/bold] stops it."
    )
    if not ok:
        fail("demo run did not complete")
