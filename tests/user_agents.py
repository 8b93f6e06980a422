"""Agents defined outside Groundwork's catalog, as a user's own package would define them.

The tests load them the way a deployment does: GROUNDWORK_AGENTS={"name": "tests.user_agents:factory"}.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, ModelSettings, WebSearchTool, function_tool

from contracts.run import EffectClass
from definitions.governed import governed_tool


def receipt_key(arguments: dict[str, Any]) -> str:
    return f"receipt-{arguments['order_id']}:{arguments['email']}"


@governed_tool(
    effect_class=EffectClass.IDEMPOTENT_WRITE,
    target="receipts",
    effect_key=receipt_key,
    domain_event="ReceiptSent",
)
def send_receipt(order_id: str, email: str) -> dict[str, Any]:
    """Send the receipt of an order to its buyer.

    Args:
        order_id: The order.
        email: Where the receipt goes.
    """
    return {"order_id": order_id, "to": email, "template": "receipt-v2"}


@function_tool
def order_total(order_id: str) -> str:
    """The total of an order.

    Args:
        order_id: The order.
    """
    return f"order {order_id}: 42.00 EUR"


def build_receipt_sender() -> Agent[None]:
    return Agent(
        name="receipt-sender",
        instructions="Look up the order, then send its receipt once.",
        tools=[order_total, send_receipt],
    )


def build_forced_filler() -> Agent[None]:
    """filler with its tool forced: the SDK forces it until the agent has used a tool."""
    from definitions.filler import produce

    return Agent(
        name="forced-filler",
        instructions="Call produce as asked, then answer briefly.",
        tools=[produce],
        model_settings=ModelSettings(tool_choice="required"),
    )


def not_an_agent() -> str:
    return "receipt-sender"


def broken() -> Agent[None]:
    raise RuntimeError("the receipts service URL is not configured")


def with_hosted_tool() -> Agent[None]:
    return Agent(name="searcher", instructions="Search.", tools=[WebSearchTool()])


NOT_CALLABLE = "build_receipt_sender"
