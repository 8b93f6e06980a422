"""Governed tools: declare a side-effecting tool once, with its effect class, the business
identity of its effect, its target and its approval rule. It stays an ordinary
`FunctionTool`, so it plugs into `Agent(tools=[...])` unchanged.

The decorated function builds the request for the target from the model's arguments; it
performs nothing itself. The effect gateway calls it inside the dispatch activity and sends
the result to the target with the effect key as idempotency key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents import FunctionTool, function_tool

from contracts.run import ApprovalRule, EffectClass, ToolExecution

EffectKeyFn = Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class ApprovalBinding:
    """What an approver approves, exactly: a decision for another revision or hash is refused."""

    subject: str
    revision: str
    content_hash: str
    preview: str = ""


BindingFn = Callable[[dict[str, Any]], ApprovalBinding]
_ATTRIBUTE = "_groundwork_effect"
_BUILDER = "_groundwork_builder"
_EXECUTION = "_groundwork_execution"


@dataclass(frozen=True)
class EffectDeclaration:
    effect_class: EffectClass
    target: str
    """Name of the target the worker is configured with (GROUNDWORK_TARGETS)."""
    effect_key: EffectKeyFn
    """Pure function of the call's arguments; runs in the workflow, so no I/O, no clock."""
    approval: ApprovalRule = ApprovalRule.NEVER
    domain_event: str = "EffectCommitted"
    fail_run_on_error: bool = False
    """When the effect fails for good, fail the run instead of telling the model."""
    approval_binding: BindingFn | None = None
    """Pure function of the arguments; default: subject = effect key, revision "1", the request hash."""
    approver_roles: tuple[str, ...] = ()
    approval_ttl_s: float = 24 * 3600
    on_expiry: str = "fail"
    """"fail" ends the run FAILED(approval_expired); "re_request" asks again."""
    max_approval_requests: int = 3
    """With "re_request": after this many unanswered requests the run ends FAILED(approval_expired)."""
    send_within_s: float = 3600.0
    """The call's deadline: how long after it is prepared its request may still be sent."""


def governed_tool(
    *,
    effect_class: EffectClass,
    target: str,
    effect_key: EffectKeyFn,
    approval: ApprovalRule = ApprovalRule.NEVER,
    domain_event: str = "EffectCommitted",
    fail_run_on_error: bool = False,
    approval_binding: BindingFn | None = None,
    approver_roles: tuple[str, ...] = (),
    approval_ttl_s: float = 24 * 3600,
    on_expiry: str = "fail",
    max_approval_requests: int = 3,
    send_within_s: float = 3600.0,
    name: str | None = None,
) -> Callable[[Callable[..., dict[str, Any]]], FunctionTool]:
    """Decorate a request builder `fn(**arguments) -> payload` as a governed function tool."""
    if on_expiry not in ("fail", "re_request"):
        raise ValueError("on_expiry must be 'fail' or 're_request'")
    if send_within_s <= 0:
        raise ValueError("send_within_s must be positive")
    if max_approval_requests < 1:
        raise ValueError("max_approval_requests must be at least 1")
    if effect_class is EffectClass.READ:
        raise ValueError("a governed tool has an effect; plain @function_tool serves reads")

    def decorate(fn: Callable[..., dict[str, Any]]) -> FunctionTool:
        tool = function_tool(fn, name_override=name)
        declaration = EffectDeclaration(
            effect_class=effect_class,
            target=target,
            effect_key=effect_key,
            approval=approval,
            domain_event=domain_event,
            fail_run_on_error=fail_run_on_error,
            approval_binding=approval_binding,
            approver_roles=approver_roles,
            approval_ttl_s=approval_ttl_s,
            on_expiry=on_expiry,
            max_approval_requests=max_approval_requests,
            send_within_s=send_within_s,
        )
        setattr(tool, _ATTRIBUTE, declaration)
        setattr(tool, _BUILDER, fn)
        return tool

    return decorate


def effect_of(tool: Any) -> EffectDeclaration | None:
    value = getattr(tool, _ATTRIBUTE, None)
    return value if isinstance(value, EffectDeclaration) else None


def as_activity(tool: FunctionTool) -> FunctionTool:
    """Run this read tool as an ordinary activity instead of a local one.

    For reads that take long (a crawl, a slow search) or that an operator wants to see as an
    activity of their own in the Web UI. Returns the tool itself, so it reads in place:
    `Agent(tools=[as_activity(crawl_site)])`.
    """
    if effect_of(tool) is not None:
        raise TypeError(f"{tool.name} is a governed tool; governed tools always run as activities")
    setattr(tool, _EXECUTION, ToolExecution.ACTIVITY)
    return tool


def execution_of(tool: Any) -> ToolExecution:
    value = getattr(tool, _EXECUTION, None)
    return value if isinstance(value, ToolExecution) else ToolExecution.LOCAL


def builder_of(tool: Any) -> Callable[..., dict[str, Any]] | None:
    value = getattr(tool, _BUILDER, None)
    return value if callable(value) else None
