"""classify_http_status: which provider answers Temporal retries, and after how long."""

from __future__ import annotations

from datetime import timedelta

import httpx2
import pytest

from adapters.models.retry_posture import RetryPosture, classify_http_status


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529])
def test_transient_statuses_are_retryable(status: int) -> None:
    posture = classify_http_status(status, {})
    assert posture.retryable
    assert posture.delay is None
    assert str(status) in posture.reason


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_errors_are_not_retryable(status: int) -> None:
    posture = classify_http_status(status, {})
    assert not posture.retryable
    assert posture.delay is None
    assert str(status) in posture.reason


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "1"}, timedelta(seconds=1)),
        ({"retry-after": "3"}, timedelta(seconds=3)),
        ({"retry-after": "0.5"}, timedelta(milliseconds=500)),
        ({"retry-after": "0"}, timedelta(0)),
        ({"retry-after-ms": "250"}, timedelta(milliseconds=250)),
        ({"retry-after-ms": "1500.5"}, timedelta(milliseconds=1500.5)),
        # retry-after-ms is the more precise of the two and wins
        ({"retry-after-ms": "1500", "retry-after": "2"}, timedelta(milliseconds=1500)),
        # an unparsable retry-after-ms falls back to retry-after
        ({"retry-after-ms": "soon", "retry-after": "2"}, timedelta(seconds=2)),
        # header names are case-insensitive, even in a plain dict
        ({"Retry-After": "2"}, timedelta(seconds=2)),
        ({"Retry-After-Ms": "40"}, timedelta(milliseconds=40)),
    ],
)
def test_retry_after_is_parsed(headers: dict[str, str], expected: timedelta) -> None:
    posture = classify_http_status(429, headers)
    assert posture.retryable
    assert posture.delay == expected


@pytest.mark.parametrize(
    "value",
    [
        "Wed, 21 Oct 2015 07:28:00 GMT",  # an HTTP date: the retry policy decides
        "soon",
        "",
        "-1",
        "nan",
        "inf",
    ],
)
def test_unusable_retry_after_gives_no_delay(value: str) -> None:
    for name in ("retry-after", "retry-after-ms"):
        posture = classify_http_status(503, {name: value})
        assert posture.retryable
        assert posture.delay is None, (name, value)


def test_delay_is_kept_even_when_not_retryable() -> None:
    posture = classify_http_status(400, {"retry-after": "5"})
    assert posture == RetryPosture(False, timedelta(seconds=5), posture.reason)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_x_should_retry_true_overrides_a_client_error(status: int) -> None:
    posture = classify_http_status(status, {"x-should-retry": "true", "retry-after": "2"})
    assert posture.retryable
    assert posture.delay == timedelta(seconds=2)
    assert "server says retry" in posture.reason


@pytest.mark.parametrize("status", [408, 409, 429, 500, 503])
def test_x_should_retry_false_overrides_a_transient_status(status: int) -> None:
    posture = classify_http_status(status, {"X-Should-Retry": "false"})
    assert not posture.retryable
    assert "do not retry" in posture.reason


def test_unknown_x_should_retry_value_is_ignored() -> None:
    assert classify_http_status(500, {"x-should-retry": "maybe"}).retryable
    assert not classify_http_status(400, {"x-should-retry": "maybe"}).retryable


def test_httpx2_headers_as_the_openai_client_passes_them() -> None:
    headers = httpx2.Headers({"Retry-After": "7", "X-Should-Retry": "true"})
    posture = classify_http_status(400, headers)
    assert posture.retryable
    assert posture.delay == timedelta(seconds=7)


def test_exhausted_quota_is_not_retried_even_as_429() -> None:
    posture = classify_http_status(429, {"retry-after": "1"}, "insufficient_quota")
    assert not posture.retryable
    assert "insufficient_quota" in posture.reason


def test_very_long_retry_after_is_capped() -> None:
    from adapters.models.retry_posture import MAX_RETRY_AFTER

    assert classify_http_status(429, {"retry-after": "86400"}).delay == MAX_RETRY_AFTER
    assert classify_http_status(429, {"retry-after": "1e300"}).delay == MAX_RETRY_AFTER
