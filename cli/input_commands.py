"""`groundwork input submit`: post an input to the trigger service (POST /v1/inputs)."""

from __future__ import annotations

import json
import time
from typing import Any

import typer
from ulid import ULID

from cli._common import console, fail, settings
from cli.trigger_client import TriggerClient, endpoint

input_app = typer.Typer(no_args_is_help=True, help="Inputs: commands, events and context for runs.")


def _outcome(record: dict[str, Any]) -> str:
    disposition = record.get("disposition", "pending")
    refs = record.get("activation_refs") or []
    if disposition == "RESUME":
        runs = sorted({str(r.get("run_id")) for r in refs})
        return f"disposition RESUME: delivered to {len(refs)} run(s)" + (
            f" ({', '.join(runs)})" if runs else ""
        )
    if disposition == "ACTIVATE":
        return "disposition ACTIVATE: started run " + ", ".join(str(r.get("run_id")) for r in refs)
    if disposition == "pending":
        return "activation pending (the service acts on it shortly)"
    return f"disposition {disposition}: recorded"


@input_app.command("submit")
def submit(
    type_: str = typer.Option(..., "--type", help="Input type, e.g. deploy.finished."),
    subject: str = typer.Option(..., "--subject", help="What it is about, e.g. service-a."),
    data: str = typer.Option("{}", "--data", help="JSON object."),
    kind: str = typer.Option("event", "--kind", help="command | event | context."),
    source: str = typer.Option("cli", "--source", help="Who produced it (dedupe scope)."),
    source_event_id: str | None = typer.Option(
        None, "--source-event-id", help="Dedupe key within the source (default: a new ULID)."
    ),
    target: str | None = typer.Option(None, "--target", help="A run id, session id or agent."),
    wait_s: float = typer.Option(
        10.0, "--wait-s", help="How long to wait for its activation (0: do not wait)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the outcome as JSON."),
) -> None:
    """Log an input durably through the trigger service, then show what its policy did with it
    (PROJECT: recorded; RESUME: delivered to waiting runs; ACTIVATE: started a run)."""
    try:
        payload = json.loads(data)
    except ValueError as err:
        fail(f"--data is not JSON: {err}", code=2)
    if not isinstance(payload, dict):
        fail("--data must be a JSON object", code=2)
    if not type_.strip() or not subject.strip():
        fail("--type and --subject must not be empty", code=2)
    config = settings("WARNING")
    envelope: dict[str, Any] = {
        "source_event_id": source_event_id or f"cli-{str(ULID()).lower()}",
        "kind": kind,
        "type": type_,
        "source": source,
        "subject": subject,
        "data": payload,
    }
    if target is not None:
        envelope["target"] = target
    client = TriggerClient(endpoint(config))
    try:
        response = client.request("POST", "/v1/inputs", json=envelope)
        accepted = response.json()
        input_id = accepted["input_id"]
        record: dict[str, Any] = {"disposition": "pending", "activation_refs": []}
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            record = client.request("GET", f"/v1/inputs/{input_id}").json()
            if record.get("disposition") != "pending" or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
    finally:
        client.close()
    if as_json:
        console.print_json(
            json.dumps(
                {
                    "input_id": input_id,
                    "duplicate": accepted.get("duplicate", False),
                    "status": response.status_code,
                    "source_event_id": envelope["source_event_id"],
                    "disposition": record.get("disposition"),
                    "activation_refs": record.get("activation_refs", []),
                }
            )
        )
        return
    logged = "already logged (same source_event_id)" if accepted.get("duplicate") else "logged"
    console.print(f"input {input_id} {logged}; {_outcome(record)}", highlight=False, soft_wrap=True)
