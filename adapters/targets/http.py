"""`HttpTarget`: an HTTP service honouring `Idempotency-Key`, with a lookup-by-key endpoint.

The classification of failures is the point of this module. What matters is whether the
request may have reached the service: a refused or timed-out connect sent nothing (safe to
retry), while a timeout or a dropped connection after the request went out may hide a
commit, so only a lookup by key (`reconcile`) can settle it.

Protocol (the one `adapters.targets.http_service` implements):
    POST {base}/effects          headers Idempotency-Key, X-Request-Hash; JSON body
        2xx {"ref", "request_hash", ...}   409 same key, other request
    GET  {base}/effects/{key}    200 receipt | 404 {"error": "not_found"}
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import quote

import httpx2

from adapters.targets.base import (
    Committed,
    EffectTarget,
    NotCommitted,
    Reconciliation,
    TargetConflictError,
    TargetRejectedError,
    TargetTransientError,
    TargetUnknownError,
    Unknown,
)

# Statuses that say "not now" rather than "never", although they are 4xx.
_RETRYABLE_4XX = frozenset({408, 425, 429})
# A gateway answering for an upstream that failed or timed out mid-request: it may have committed.
_GATEWAY_AMBIGUOUS = frozenset({502, 504})


def _header_safe(value: str) -> bool:
    """Header values must be visible ASCII; anything else could be mangled or refused in transit."""
    return bool(value) and value == value.strip() and all(" " <= ch <= "~" for ch in value)


def _json(response: httpx2.Response) -> Any:
    try:
        return response.json()
    except (ValueError, UnicodeDecodeError):
        return None


class HttpTarget(EffectTarget):
    """Client of one idempotent HTTP target; safe for concurrent use within one event loop.

    `strict_not_found` (default) believes a 404 on lookup only when the body says
    `{"error": "not_found"}`: a 404 from a wrong base URL or a proxy must not read as
    "not committed", which would let the ledger dispatch a duplicate.
    """

    def __init__(
        self,
        base_url: str,
        *,
        name: str = "http",
        timeout_s: float = 10.0,
        connect_timeout_s: float | None = None,
        strict_not_found: bool = True,
        trust_env: bool = False,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self._timeout = httpx2.Timeout(
            timeout_s, connect=connect_timeout_s if connect_timeout_s is not None else timeout_s
        )
        self._strict_not_found = strict_not_found
        self._trust_env = trust_env
        self._client: httpx2.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _http(self) -> httpx2.AsyncClient:
        """One pooled client per event loop (a client cannot outlive the loop it was made in)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = httpx2.AsyncClient(timeout=self._timeout, trust_env=self._trust_env)
            self._loop = loop
        return self._client

    def _effect_url(self, effect_key: str) -> str:
        return f"{self.base_url}/effects/{quote(effect_key, safe='')}"

    async def execute(
        self, effect_key: str, request_hash: str, payload: dict[str, Any]
    ) -> Committed:
        if not _header_safe(effect_key) or not _header_safe(request_hash):
            raise TargetRejectedError(
                "effect key and request hash must be visible ASCII to travel as HTTP headers"
            )
        try:
            body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
        except (TypeError, ValueError) as err:
            raise TargetRejectedError(f"payload is not JSON-serializable: {err}") from err
        headers = {
            "Idempotency-Key": effect_key,
            "X-Request-Hash": request_hash,
            "Content-Type": "application/json",
        }
        try:
            response = await self._http().post(
                f"{self.base_url}/effects", content=body, headers=headers
            )
        except (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout) as err:
            raise TargetTransientError(
                f"{self.name}: not sent ({type(err).__name__}: {err})"
            ) from err
        except httpx2.LocalProtocolError as err:
            # Raised while forming the request, before any byte is on the wire.
            raise TargetRejectedError(f"{self.name}: request not sendable: {err}") from err
        except httpx2.TransportError as err:
            # Read/write timeouts, resets, "server disconnected without a response".
            raise TargetUnknownError(
                f"{self.name}: no answer after sending ({type(err).__name__}: {err})"
            ) from err
        return self._receipt(effect_key, request_hash, response)

    def _receipt(self, effect_key: str, request_hash: str, response: httpx2.Response) -> Committed:
        status = response.status_code
        body = _json(response)
        if 200 <= status < 300:
            if not isinstance(body, dict) or not isinstance(body.get("ref"), str):
                raise TargetUnknownError(
                    f"{self.name}: {status} without a readable receipt; reconcile by key"
                )
            recorded = body.get("request_hash")
            if isinstance(recorded, str) and recorded != request_hash:
                raise TargetConflictError(
                    f"{self.name}: key {effect_key!r} holds request {recorded}, not {request_hash}"
                )
            return Committed(
                external_ref=body["ref"],
                request_hash=recorded if isinstance(recorded, str) else request_hash,
                details={"status": status, "created": bool(body.get("created", status == 201))},
            )
        detail = body if body is not None else response.text[:200]
        if status == 409:
            raise TargetConflictError(f"{self.name}: key {effect_key!r} conflicts: {detail}")
        if status in _GATEWAY_AMBIGUOUS:
            raise TargetUnknownError(f"{self.name}: {status} from a gateway; reconcile by key")
        if status >= 500 or status in _RETRYABLE_4XX:
            raise TargetTransientError(f"{self.name}: {status} {detail}")
        raise TargetRejectedError(f"{self.name}: {status} {detail}")

    async def reconcile(self, effect_key: str) -> Reconciliation:
        try:
            response = await self._http().get(self._effect_url(effect_key))
        except httpx2.HTTPError as err:
            return Unknown(f"{self.name}: lookup failed ({type(err).__name__}: {err})")
        body = _json(response)
        if response.status_code == 200:
            if (
                isinstance(body, dict)
                and isinstance(body.get("ref"), str)
                and body.get("key", effect_key) == effect_key
            ):
                recorded = body.get("request_hash")
                return Committed(
                    external_ref=body["ref"],
                    request_hash=recorded if isinstance(recorded, str) else None,
                    details={"status": 200},
                )
            return Unknown(f"{self.name}: lookup answered 200 without a receipt for the key")
        if response.status_code == 404:
            if not self._strict_not_found or (
                isinstance(body, dict) and body.get("error") == "not_found"
            ):
                return NotCommitted()
            return Unknown(f"{self.name}: 404 without a not_found body (wrong URL?)")
        return Unknown(f"{self.name}: lookup answered {response.status_code}")

    async def close(self) -> None:
        client, self._client, self._loop = self._client, None, None
        if client is not None:
            await client.aclose()
