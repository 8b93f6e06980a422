#!/usr/bin/env python
"""Diagnostic for bench/waits.py: memory of one sandboxed AgentRunWorkflow instance.

Every run a worker holds in its sticky cache is one SandboxedWorkflowRunner instance, and
each instance re-imports, in its own sys.modules, every module of the workflow that is not
passed through. This script creates --instances instances the way the worker does
(workers.worker.sandbox_runner(), the SDK's own create_instance with the SDK's validation
details), keeps them alive, and reports the RSS growth per instance and which modules each
instance re-imported, and the CPU it takes to create one (paid by every new run and by
every run that comes back after eviction from the cache). With --extra-passthrough it does the same with more modules passed
through (--drop-passthrough: fewer), to show how much of the figure those modules are.
Prints one JSON line.

  .venv/bin/python bench/_waits_sandbox.py --instances 100
  .venv/bin/python bench/_waits_sandbox.py --instances 100 --drop-passthrough contracts
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


async def amain() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--extra-passthrough", nargs="*", default=[])
    parser.add_argument("--drop-passthrough", nargs="*", default=[])
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

    import temporalio.workflow
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from workers.worker import PASSTHROUGH_MODULES, prepare_agents_sdk, sandbox_runner
    from workflows.agent_run import AgentRunWorkflow

    prepare_agents_sdk()
    runner = sandbox_runner()
    passthrough = [m for m in PASSTHROUGH_MODULES if m not in args.drop_passthrough]
    passthrough += args.extra_passthrough
    if args.extra_passthrough or args.drop_passthrough:
        restrictions = SandboxRestrictions.default.with_passthrough_modules(*passthrough)
        runner = SandboxedWorkflowRunner(restrictions=restrictions)
    defn = temporalio.workflow._Definition.must_from_class(AgentRunWorkflow)
    captured = []
    original = SandboxedWorkflowRunner.create_instance

    def capture(self, det):  # type: ignore[no-untyped-def]
        captured.append(det)
        return original(self, det)

    SandboxedWorkflowRunner.create_instance = capture  # type: ignore[method-assign]
    runner.prepare_workflow(defn)  # the SDK's own details for a validation instance
    SandboxedWorkflowRunner.create_instance = original  # type: ignore[method-assign]
    details = captured[0]

    first = runner.create_instance(dataclasses.replace(details))  # warm: first-time costs
    # A module passed through is the worker's own object; a re-imported one is a new copy.
    reimported = sorted(
        name
        for name, mod in first.importer.new_modules.items()  # type: ignore[attr-defined]
        if name not in ("sys", "builtins", "__main__") and sys.modules.get(name) is not mod
    )
    gc.collect()
    proc = psutil.Process()
    before = proc.memory_info().rss
    cpu0 = time.process_time()
    held = [runner.create_instance(dataclasses.replace(details)) for _ in range(args.instances)]
    cpu1 = time.process_time()
    gc.collect()
    after = proc.memory_info().rss
    print(
        json.dumps(
            {
                "instances": len(held),
                "passthrough": passthrough,
                "rss_mb_per_instance": round((after - before) / len(held) / 2**20, 3),
                "cpu_ms_per_instance": round((cpu1 - cpu0) * 1000 / len(held), 2),
                "reimported_per_instance": len(reimported),
                "reimported_groundwork": [
                    n for n in reimported if n.split(".")[0] in ("contracts", "workflows")
                ],
                "reimported_other_top_level": sorted(
                    {n.split(".")[0] for n in reimported} - {"contracts", "workflows"}
                ),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(amain())
