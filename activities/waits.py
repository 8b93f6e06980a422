"""Durable-wait activities: install a subscription (insert, then scan inputs), close it."""

from __future__ import annotations

from temporalio import activity

from activities._context import activity_logger
from adapters.waits import WaitStore
from contracts.waits import (
    SUBSCRIPTION_CLOSE_ACTIVITY,
    SUBSCRIPTION_INSTALL_ACTIVITY,
    CloseSubscriptionInput,
    InstallResult,
    Subscription,
)


class WaitActivities:
    def __init__(self, store: WaitStore) -> None:
        self._store = store

    @activity.defn(name=SUBSCRIPTION_INSTALL_ACTIVITY)
    async def install(self, subscription: Subscription) -> InstallResult:
        deliveries = await self._store.install(subscription)
        activity_logger(subscription_id=subscription.subscription_id).info(
            "subscription_installed", type=subscription.type, subject=subscription.subject,
            after_cursor=subscription.after_cursor, delivered=len(deliveries),
        )  # fmt: skip
        return InstallResult(deliveries=deliveries)

    @activity.defn(name=SUBSCRIPTION_CLOSE_ACTIVITY)
    async def close(self, request: CloseSubscriptionInput) -> None:
        await self._store.close(request.subscription_id, request.status)
