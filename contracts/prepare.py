"""prepare: the deterministic half of a governed tool call, run inside the workflow.

Authorize against the policy snapshot, fix the effect key and the request hash, set the
deadline. No I/O, no clock but the one passed in: the same inputs give the same decision
on every replay.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from contracts.effects import MAX_EFFECT_KEY, Denied, NeedsApproval, PreparedCall
from contracts.hashing import content_hash
from contracts.run import ApprovalRule, ToolPolicy


def request_hash(tool_name: str, target: str, arguments: dict[str, Any]) -> str:
    return content_hash({"tool": tool_name, "target": target, "arguments": arguments})


def prepare(
    *,
    run_id: str,
    agent_name: str,
    owner_agent: str | None,
    tool_name: str,
    call_id: str,
    arguments: dict[str, Any],
    policy: ToolPolicy,
    target: str,
    effect_key: str,
    domain_event: str,
    now: datetime,
    approved: bool = False,
) -> PreparedCall | Denied | NeedsApproval:
    if not policy.allowed:
        return Denied(tool_name=tool_name, reason=f"tool {tool_name!r} is not allowed for this run")
    if not effect_key or len(effect_key) > MAX_EFFECT_KEY:
        return Denied(
            tool_name=tool_name, reason=f"effect key must be 1-{MAX_EFFECT_KEY} characters"
        )
    digest = request_hash(tool_name, target, arguments)
    if policy.approval is ApprovalRule.ALWAYS and not approved:
        return NeedsApproval(tool_name=tool_name, effect_key=effect_key, request_hash=digest)
    return PreparedCall(
        run_id=run_id,
        agent_name=agent_name,
        owner_agent=owner_agent,
        tool_name=tool_name,
        call_id=call_id,
        effect_class=policy.effect_class,
        target=target,
        effect_key=effect_key,
        request_hash=digest,
        arguments=arguments,
        deadline=now + timedelta(seconds=policy.send_within_s),
        domain_event=domain_event,
    )
