"""A fake OpenAI HTTP server on 127.0.0.1 for route tests: no network, no real key.

It serves `POST /v1/responses` (what `openai:<model>` calls through `OpenAIResponsesModel`) and
`POST /v1/chat/completions` (what `openai-compatible:<base-url>|<model>` calls through
`OpenAIChatCompletionsModel`). Each test plans its replies in order (status, headers, JSON
body); the server records every request (path, headers, parsed body, arrival time).

When the plan runs out the server answers 400 with `x-should-retry: false`, so a test that
under-plans fails fast instead of retrying for minutes.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

KNOWN_PATHS = frozenset({"/v1/responses", "/v1/chat/completions"})

_ids = itertools.count(1)


def _next_id(prefix: str) -> str:
    return f"{prefix}_fake{next(_ids):06d}"


@dataclass(frozen=True)
class PlannedReply:
    status: int = 200
    body: Any = None
    """A JSON-able value (sent as JSON), or str/bytes sent as they are."""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: Any
    """The parsed JSON body, or None when the body was empty or not JSON."""
    raw: bytes
    at: float
    """`time.monotonic()` when the request arrived."""
    status: int
    """The status the fake answered with."""


# -- response bodies the installed openai client parses ------------------------------------


def responses_usage(input_tokens: int = 11, output_tokens: int = 7) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def _response(model: str, output: list[dict[str, Any]], usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": _next_id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "temperature": 1.0,
        "top_p": 1.0,
        "usage": usage,
    }


def function_call_response(
    name: str,
    arguments: dict[str, Any],
    *,
    call_id: str | None = None,
    model: str = "gpt-fake",
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Responses API answer with one `function_call` output item."""
    item = {
        "type": "function_call",
        "id": _next_id("fc"),
        "call_id": call_id or _next_id("call"),
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }
    return _response(model, [item], usage or responses_usage())


def message_response(
    text: str, *, model: str = "gpt-fake", usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A Responses API answer with one assistant `message` holding `output_text`."""
    item = {
        "type": "message",
        "id": _next_id("msg"),
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    return _response(model, [item], usage or responses_usage())


def chat_usage(prompt_tokens: int = 13, completion_tokens: int = 5) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }


def _completion(
    model: str, message: dict[str, Any], finish_reason: str, usage: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": _next_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        ],
        "usage": usage,
    }


def chat_tool_call_completion(
    name: str,
    arguments: dict[str, Any],
    *,
    call_id: str | None = None,
    model: str = "fake-local-model",
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Chat Completions answer whose assistant message calls one function."""
    message = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "tool_calls": [
            {
                "id": call_id or _next_id("call"),
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }
    return _completion(model, message, "tool_calls", usage or chat_usage())


def chat_text_completion(
    text: str, *, model: str = "fake-local-model", usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A Chat Completions answer with a plain assistant text."""
    message = {"role": "assistant", "content": text, "refusal": None}
    return _completion(model, message, "stop", usage or chat_usage())


def error_body(
    message: str, *, type_: str = "invalid_request_error", code: str | None = None
) -> dict[str, Any]:
    """The error envelope OpenAI sends with 4xx/5xx answers."""
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


# -- the server ------------------------------------------------------------------------------


class FakeOpenAI:
    """Start with `with FakeOpenAI() as fake:`; pass `fake.base_url` as the route's base URL."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plan: deque[PlannedReply] = deque()
        self._requests: list[RecordedRequest] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # planning and inspection

    def plan(self, *replies: PlannedReply) -> None:
        with self._lock:
            self._plan.extend(replies)

    def reply(self, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.plan(PlannedReply(status=status, body=body, headers=dict(headers or {})))

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def count(self, path: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self._requests if path is None or r.path == path)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._plan)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("fake OpenAI server is not running")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as `base_url` (it appends `/responses` and so on)."""
        return f"http://127.0.0.1:{self.port}/v1"

    # lifecycle

    def start(self) -> FakeOpenAI:
        handler = _handler_for(self)
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        thread.start()
        self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # called from the handler thread

    def _answer(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> PlannedReply:
        arrived = time.monotonic()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with self._lock:
            if method != "POST" or path not in KNOWN_PATHS:
                planned = PlannedReply(
                    404,
                    error_body(f"fake OpenAI does not serve {method} {path}"),
                    {"x-should-retry": "false"},
                )
            elif self._plan:
                planned = self._plan.popleft()
            else:
                planned = PlannedReply(
                    400,
                    error_body("fake OpenAI has no planned reply left", code="fake_plan_exhausted"),
                    {"x-should-retry": "false"},
                )
            self._requests.append(
                RecordedRequest(
                    method=method,
                    path=path,
                    headers=headers,
                    body=body,
                    raw=raw,
                    at=arrived,
                    status=planned.status,
                )
            )
        return planned


def _handler_for(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            path = self.path.split("?", 1)[0]
            planned = fake._answer(self.command, path, headers, raw)
            if isinstance(planned.body, bytes):
                payload = planned.body
            elif isinstance(planned.body, str):
                payload = planned.body.encode()
            else:
                payload = json.dumps(planned.body).encode()
            self.send_response(planned.status)
            sent = {k.lower() for k in planned.headers}
            if "content-type" not in sent:
                self.send_header("Content-Type", "application/json")
            for name, value in planned.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(payload)

        do_POST = _serve
        do_GET = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
