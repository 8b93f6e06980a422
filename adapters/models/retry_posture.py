"""Turn a provider failure into a retry posture: retryable or not, and how long to wait."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

_RETRYABLE_STATUS = frozenset({408, 409, 429})


@dataclass(frozen=True)
class RetryPosture:
    retryable: bool
    delay: timedelta | None
    reason: str


def _retry_after(headers: Mapping[str, str]) -> timedelta | None:
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return timedelta(milliseconds=float(ms))
        except ValueError:
            pass
    seconds = headers.get("retry-after")
    if seconds is not None:
        try:
            return timedelta(seconds=float(seconds))
        except ValueError:
            return None  # an HTTP date; rare for model APIs, let the retry policy decide
    return None


def classify_http_status(status: int, headers: Mapping[str, str]) -> RetryPosture:
    """408, 409, 429 and 5xx are retryable; other 4xx are not; x-should-retry overrides."""
    delay = _retry_after(headers)
    hint = headers.get("x-should-retry")
    if hint == "true":
        return RetryPosture(True, delay, f"HTTP {status}, server says retry")
    if hint == "false":
        return RetryPosture(False, delay, f"HTTP {status}, server says do not retry")
    if status in _RETRYABLE_STATUS or status >= 500:
        return RetryPosture(True, delay, f"HTTP {status} is transient")
    return RetryPosture(False, delay, f"HTTP {status} will not succeed on retry")
