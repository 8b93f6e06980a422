"""Durable waits: a run subscribes to inputs by type and subject; inputs are logged; each
matching (subscription, input) pair is delivered exactly once, whichever side comes first."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

SUBSCRIPTION_INSTALL_ACTIVITY = "groundwork.subscription_install"
SUBSCRIPTION_CLOSE_ACTIVITY = "groundwork.subscription_close"


class ResumePolicy(StrEnum):
    FIRST_MATCH = "first_match"
    ALL = "all"


class Subscription(BaseModel):
    subscription_id: str
    run_id: str
    type: str = Field(min_length=1)
    subject: str = Field(min_length=1)
    resume_policy: ResumePolicy = ResumePolicy.FIRST_MATCH
    after_cursor: int = 0
    """Only inputs logged after this cursor match (the run's newest consumed input)."""
    since: datetime | None = None
    """And only inputs logged at or after this time (the run's start): a new run is not
    woken by an old event. Compared with the database clock, so keep clocks in sync."""
    expires_at: datetime


class LoggedInput(BaseModel):
    input_id: int
    type: str
    subject: str
    source: str = "cli"
    data: dict[str, Any] = Field(default_factory=dict)
    logged_at: datetime | None = None


class Delivery(BaseModel):
    """One input delivered to one subscription (the `deliver_input` signal's payload)."""

    subscription_id: str
    run_id: str
    input: LoggedInput


class InstallResult(BaseModel):
    deliveries: list[Delivery]


class CloseSubscriptionInput(BaseModel):
    subscription_id: str
    status: str
