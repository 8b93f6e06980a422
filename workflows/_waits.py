"""Durable waits: subscribe, release the worker, resume on a matching input."""

from __future__ import annotations

import contextlib
import json
from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agents.tool_context import ToolContext


from contracts.status import RunStatus, WaitingReason
from contracts.waits import (
    SUBSCRIPTION_CLOSE_ACTIVITY,
    SUBSCRIPTION_INSTALL_ACTIVITY,
    CloseSubscriptionInput,
    Delivery,
    InstallResult,
    Subscription,
)
from workflows._run_base import TOOL_RETRY, RunBase


class WaitsMixin(RunBase):
    @workflow.signal
    def deliver_input(self, delivery: Delivery) -> None:
        """An input matched one of this run's subscriptions; duplicates are the same delivery."""
        self._delivered.setdefault(delivery.subscription_id, {})[delivery.input.input_id] = delivery

    # -- durable waits --------------------------------------------------------------------

    async def _wait_for_event(self, ctx: ToolContext[Any], arguments: str) -> str:
        try:
            args = json.loads(arguments or "{}")
            type_, subject = str(args["type"]), str(args["subject"])
            timeout = timedelta(seconds=max(1, int(args.get("timeout_s", 3600))))
        except (ValueError, KeyError, TypeError) as err:
            return (
                f"error (invalid_arguments): wait_for_event needs type, subject, timeout_s: {err}"
            )
        subscription = Subscription(
            subscription_id=f"{self._spec.run_id}:{workflow.uuid4()}",
            run_id=self._spec.run_id,
            type=type_,
            subject=subject,
            after_cursor=self._state.input_cursor,
            since=workflow.info().start_time - timedelta(seconds=5),  # margin for clock skew
            expires_at=workflow.now() + timeout,
        )
        key = subscription.subscription_id
        installed: InstallResult = await workflow.execute_activity(
            SUBSCRIPTION_INSTALL_ACTIVITY,
            subscription,
            result_type=InstallResult,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=TOOL_RETRY,
        )
        for delivery in installed.deliveries:
            self.deliver_input(delivery)
        waited = False
        if not self._delivered.get(key):
            waited = True
            self._transition(
                RunStatus.WAITING,
                "WaitingForEvent",
                waiting_reason=WaitingReason.EVENT,
                subscription_id=key,
                type=type_,
                subject=subject,
            )
            with contextlib.suppress(TimeoutError):  # expiry is an answer too: "timed out"
                await workflow.wait_condition(
                    lambda: bool(self._delivered.get(key)), timeout=timeout
                )
        delivered = self._delivered.get(key, {})
        first = delivered[min(delivered)] if delivered else None
        await workflow.execute_activity(
            SUBSCRIPTION_CLOSE_ACTIVITY,
            CloseSubscriptionInput(subscription_id=key, status="satisfied" if first else "expired"),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=TOOL_RETRY,
        )
        if waited:
            self._transition(
                RunStatus.RUNNING,
                "EventDelivered" if first else "WaitExpired",
                subscription_id=key,
                input_id=first.input.input_id if first else None,
            )
        if first is None:
            return f"timed out after {timeout} waiting for {type_} about {subject}"
        self._state.input_cursor = max(self._state.input_cursor, first.input.input_id)
        return json.dumps(
            {"input_id": first.input.input_id, "type": first.input.type, "subject": first.input.subject,
             "data": first.input.data},
            sort_keys=True,
        )  # fmt: skip
