"""Who is calling: bearer tokens for clients, HMAC signatures for webhook sources."""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass, field

from pydantic import SecretStr

from contracts.inputs import Caller
from trigger.config import TokenGrant


class Unauthorized(Exception):
    pass


def caller_for_token(header: str | None, tokens: dict[str, TokenGrant]) -> tuple[str, Caller]:
    if not header or not header.startswith("Bearer "):
        raise Unauthorized("missing bearer token")
    token = header.removeprefix("Bearer ").strip()
    for known, grant in tokens.items():
        if hmac.compare_digest(known.encode(), token.encode()):
            return known, Caller(tenant=grant.tenant, principal=grant.principal, roles=grant.roles)
    raise Unauthorized("unknown bearer token")


def verify_webhook(
    source: str, body: bytes, signature: str | None, secrets: dict[str, SecretStr]
) -> None:
    """`X-Hub-Signature-256: sha256=<hex>` over the raw body, with the source's secret."""
    secret = secrets.get(source)
    if secret is None:
        raise Unauthorized(f"no webhook secret configured for source {source!r}")
    if not signature or not signature.startswith("sha256="):
        raise Unauthorized("missing X-Hub-Signature-256")
    expected = hmac.new(secret.get_secret_value().encode(), body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature.removeprefix("sha256=")):
        raise Unauthorized("bad webhook signature")


@dataclass
class RateLimiter:
    """A token bucket per key; `take` answers how long to wait when the bucket is empty."""

    rate: float
    burst: int
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)

    def take(self, key: str) -> float:
        now = time.monotonic()
        tokens, last = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) * self.rate)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate
        self._buckets[key] = (tokens - 1.0, now)
        return 0.0
