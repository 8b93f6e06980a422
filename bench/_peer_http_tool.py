"""The peer doing the e2e workload's side effect: peer_baseline.py with an HTTP tool.

bench/effects.py runs this file in the peer's venv instead of peer_baseline.py for
`peer_tool_turns_per_s`. It is peer_baseline.py's `temporal_agent_tool_activities` scenario
(Temporal's OpenAI Agents integration, `activity_as_tool`) with one change: the tool
activity publishes a note to the same HTTP target our e2e phase publishes to, the way a
careful user without a ledger would (Idempotency-Key from the workflow and activity ids,
so Temporal's retries of the activity do not duplicate the note), with the HTTP client our
HttpTarget uses (httpx2, which openai brings into the peer's venv). Same model script, same
agent, same turns; what is left between the two sides is our ledger and gateway.

The activity keeps peer_baseline's name and signature (`lookup_activity(x: int) -> str`):
the workflow, imported fresh by the sandbox from peer_baseline, schedules it by name, and
the worker registers this implementation under that name. GW_PEER_TARGET_URL names the
target; GW_PEER_KEY_PREFIX prefixes the keys so the e2e checks can tell them apart.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import httpx2
import peer_baseline as pb
from temporalio import activity

TARGET_URL = os.environ.get("GW_PEER_TARGET_URL", "")
KEY_PREFIX = os.environ.get("GW_PEER_KEY_PREFIX", "peer")
_client: httpx2.AsyncClient | None = None


def _http() -> httpx2.AsyncClient:
    global _client
    if _client is None:
        _client = httpx2.AsyncClient(timeout=httpx2.Timeout(10.0))
    return _client


@activity.defn(name="lookup_activity")
async def publish_note_activity(x: int) -> str:
    """Publish note x at the HTTP target; Temporal's retries reuse the idempotency key."""
    info = activity.info()
    key = f"{KEY_PREFIX}-{info.workflow_id}-{info.activity_id}"
    note_id, revision = f"{info.workflow_id}-n{x}", x + 1
    # The body notes-writer's publish_note builds for the target (definitions/notes_writer.py).
    body: dict[str, Any] = {
        "path": f"notes/{note_id}.md",
        "content": f"# {info.workflow_id} note {x}\n\nrevision {revision} of a benchmark note.\n",
        "message": f"Publish {note_id} r{revision}",
    }
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    response = await _http().post(
        f"{TARGET_URL}/effects",
        content=text,
        headers={
            "Idempotency-Key": key,
            "X-Request-Hash": hashlib.sha256(text.encode()).hexdigest(),
            "Content-Type": "application/json",
        },
    )
    response.raise_for_status()
    return f"published {response.json().get('ref')}"


pb.lookup_activity = publish_note_activity  # worker_main registers the module's global
pb.__file__ = os.path.abspath(__file__)  # WorkerProc starts `python <this file> --worker`

if __name__ == "__main__":
    if not TARGET_URL:
        sys.exit("GW_PEER_TARGET_URL is not set (the HTTP target's base URL)")
    pb.main()
