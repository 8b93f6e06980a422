"""Record the committed replay histories: `python -m tests.histories.record` (needs `groundwork up`).

Re-record only on purpose: a history that no longer replays means the workflow changed in a
way running workflows would notice, which needs workflow versioning, not a new file.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ulid import ULID

from contracts.run import Release, RunSpec
from workers.client import connect
from workers.endpoints import resolve
from workers.run_client import start_run
from workers.settings import Settings

HERE = Path(__file__).parent

CASES = {
    "agent_run_source_reader": RunSpec(
        run_id=f"history-source-reader-{str(ULID()).lower()}",
        release=Release(agent="source-reader", model_route="scripted:source-reader-demo"),
        input="Where is RetryPolicy defined?",
    ),
}


async def main() -> None:
    settings = Settings()
    found = resolve(settings)
    client = await connect(found.temporal_address, settings.temporal_namespace)
    for name, spec in CASES.items():
        handle = await start_run(client, spec, settings.task_queue)
        await handle.result()
        history = await handle.fetch_history()
        # The file is named after the workflow id: replay needs it (the run checks its own id).
        (HERE / f"{handle.id}.json").write_text(history.to_json())
        print(f"recorded {name} ({len(history.events)} events)")


if __name__ == "__main__":
    asyncio.run(main())
