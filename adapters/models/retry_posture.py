"""Turn a provider failure into a retry posture: retryable or not, and how long to wait."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

_RETRYABLE_STATUS = frozenset({408, 409, 429})
MAX_RETRY_AFTER = timedelta(minutes=10)
"""A server asking for a longer wait is capped: the activity's own timeouts still govern."""
_NEVER_RETRY_CODES = frozenset({"insufficient_quota", "invalid_api_key"})


@dataclass(frozen=True)
class RetryPosture:
    retryable: bool
    delay: timedelta | None
    reason: str


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive lookup (httpx headers already are; a plain dict may not be)."""
    value = headers.get(name)
    if value is not None:
        return value
    for key, candidate in headers.items():
        if key.lower() == name:
            return candidate
    return None


def _delay(value: str | None, unit: timedelta) -> timedelta | None:
    """A finite, non-negative number of `unit`s; anything else (an HTTP date, junk) is None."""
    if value is None:
        return None
    try:
        amount = float(value)
    except ValueError:
        return None
    if not math.isfinite(amount) or amount < 0:
        return None
    try:
        return min(amount * unit, MAX_RETRY_AFTER)
    except OverflowError:
        return MAX_RETRY_AFTER


def _retry_after(headers: Mapping[str, str]) -> timedelta | None:
    delay = _delay(_header(headers, "retry-after-ms"), timedelta(milliseconds=1))
    if delay is not None:
        return delay
    # An HTTP date is rare for model APIs; then the retry policy decides.
    return _delay(_header(headers, "retry-after"), timedelta(seconds=1))


def classify_http_status(
    status: int, headers: Mapping[str, str], error_code: str | None = None
) -> RetryPosture:
    """408, 409, 429 and 5xx are retryable; other 4xx are not; x-should-retry overrides.

    An error code that no wait can fix (an exhausted quota answered as 429) is never retried.
    """
    delay = _retry_after(headers)
    if error_code in _NEVER_RETRY_CODES:
        return RetryPosture(False, delay, f"HTTP {status} ({error_code}) will not succeed on retry")
    hint = _header(headers, "x-should-retry")
    if hint == "true":
        return RetryPosture(True, delay, f"HTTP {status}, server says retry")
    if hint == "false":
        return RetryPosture(False, delay, f"HTTP {status}, server says do not retry")
    if status in _RETRYABLE_STATUS or status >= 500:
        return RetryPosture(True, delay, f"HTTP {status} (transient)")
    return RetryPosture(False, delay, f"HTTP {status} will not succeed on retry")
