"""The CLI's client of the trigger service's HTTP API (GROUNDWORK_TRIGGER_URL / _TOKEN).

Commands that talk to the service go through here: one clear error line and a non-zero exit
when it cannot be reached or refuses a request (exit 2 for a request it found bad, 1 for
everything else: not reachable, not authorized, rate-limited, a server error)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

import httpx2
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from cli._common import fail
from trigger.config import TokenGrant
from workers.endpoints import read_state
from workers.settings import Settings

BAD_REQUEST = {400, 404, 409, 413, 415, 422}


class TriggerClientSettings(BaseSettings):
    """Where the CLI finds the trigger service and what it authenticates with."""

    model_config = SettingsConfigDict(env_prefix="GROUNDWORK_TRIGGER_", extra="ignore")

    url: str | None = None
    """Base URL of the service; default: the running embedded stack's, else 127.0.0.1:<port>."""
    token: SecretStr | None = None
    """Bearer token the CLI sends; default: the only token in GROUNDWORK_TRIGGER_TOKENS."""
    port: int = 8080
    tokens: dict[str, TokenGrant] = Field(default_factory=dict)


@dataclass(frozen=True)
class Endpoint:
    url: str
    token: str


def endpoint(config: Settings) -> Endpoint:
    try:
        client = TriggerClientSettings()
    except Exception as err:  # pydantic ValidationError: name the variable
        fail(f"invalid GROUNDWORK_TRIGGER_* configuration: {err}".replace("\n", " "))
    url = client.url
    if url is None:
        state = read_state(config)
        found = state.get("trigger_url") if state else None
        url = str(found) if found else f"http://127.0.0.1:{client.port}"
    if client.token is not None:
        token = client.token.get_secret_value()
    elif len(client.tokens) == 1:
        token = next(iter(client.tokens))
    else:
        fail(
            "set GROUNDWORK_TRIGGER_TOKEN to a bearer token the trigger service knows"
            " (one of GROUNDWORK_TRIGGER_TOKENS)"
        )
    return Endpoint(url.rstrip("/"), token)


def unreachable(where: Endpoint, err: Exception) -> NoReturn:
    fail(
        f"cannot reach the trigger service at {where.url} ({type(err).__name__}: {err}); "
        "start one with `groundwork up --detach` or set GROUNDWORK_TRIGGER_URL"
    )


def refused(response: httpx2.Response) -> NoReturn:
    try:
        message = str(response.json().get("error") or response.text)
    except ValueError:
        message = response.text.strip() or response.reason_phrase
    code = 2 if response.status_code in BAD_REQUEST else 1
    fail(f"{response.status_code} from the trigger service: {message}", code=code)


class TriggerClient:
    def __init__(self, where: Endpoint, timeout_s: float = 30.0) -> None:
        self.where = where
        self._http = httpx2.Client(
            base_url=where.url,
            headers={"Authorization": f"Bearer {where.token}"},
            timeout=timeout_s,
        )

    def request(self, method: str, path: str, **kwargs: Any) -> httpx2.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx2.HTTPError as err:
            unreachable(self.where, err)
        if response.status_code >= 400:
            refused(response)
        return response

    def stream_events(
        self, path: str, last_event_id: int | None, after: int
    ) -> Iterator[tuple[int | None, str, dict[str, Any]]]:
        """One SSE connection: yields (id, event, data) until the server closes it. Transport
        errors propagate (the caller reconnects); an HTTP error answer ends the command."""
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        params = {} if last_event_id is not None else {"after": after}
        with self._http.stream("GET", path, headers=headers, params=params) as response:
            if response.status_code >= 400:
                response.read()
                refused(response)
            event_id: int | None = None
            event, data = "message", ""
            for line in response.iter_lines():
                if not line:
                    if data or event != "message":
                        yield event_id, event, json.loads(data) if data else {}
                    event_id, event, data = None, "message", ""
                elif line.startswith(":"):
                    continue  # keep-alive comment
                else:
                    name, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    if name == "id" and value.isdigit():
                        event_id = int(value)
                    elif name == "event":
                        event = value
                    elif name == "data":
                        data = f"{data}\n{value}" if data else value

    def close(self) -> None:
        self._http.close()
