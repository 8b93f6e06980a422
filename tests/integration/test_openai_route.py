"""The real OpenAI routes, end to end through the openai HTTP client, against a local fake.

Real Temporal dev server, real Postgres, real worker; the only fake is the HTTP server the
openai client talks to (tests/fake_openai.py). No network, no API key from the environment.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from agents.tool_context import ToolContext
from google.protobuf.message import Message
from openai.types.chat import ChatCompletion
from openai.types.responses import Response
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.exceptions import ApplicationError

from contracts.model_turn import MODEL_TURN_ACTIVITY
from contracts.run import RunState
from contracts.status import FailureReason, RunStatus
from definitions import source_reader
from tests.fake_openai import (
    FakeOpenAI,
    PlannedReply,
    RecordedRequest,
    chat_text_completion,
    chat_tool_call_completion,
    error_body,
    function_call_response,
    message_response,
)
from tests.helpers import running_worker, spec, start

API_KEY = "test-key"
MODEL = "gpt-fake-1"
SEARCH_ARGS = {"package": "temporalio", "pattern": "^class RetryPolicy"}
RESPONSES = "/v1/responses"
CHAT = "/v1/chat/completions"

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@asynccontextmanager
async def openai_worker(
    client: Client, task_queue: str, database_url: str, fake: FakeOpenAI
) -> AsyncIterator[None]:
    async with running_worker(
        client,
        task_queue,
        database_url,
        openai_base_url=fake.base_url,
        openai_api_key=API_KEY,
    ):
        yield


async def real_tool_output(tool_name: str, arguments: dict[str, Any]) -> str:
    """What the tool-call activity returns for this call, computed the same way outside it."""
    tool = next(
        t for t in source_reader.build_agent().tools if getattr(t, "name", None) == tool_name
    )
    raw = json.dumps(arguments)
    ctx = ToolContext(context=None, tool_name=tool_name, tool_call_id="x", tool_arguments=raw)
    output = await tool.on_invoke_tool(ctx, raw)  # type: ignore[union-attr]
    assert isinstance(output, str)
    return output


def function_call_outputs(request: RecordedRequest) -> list[dict[str, Any]]:
    items = request.body["input"]
    assert isinstance(items, list)
    return [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]


def history_text(history: WorkflowHistory) -> str:
    """Every payload in the history decoded, plus the protobuf itself: what a leak would show."""
    proto = History(events=history.events)
    chunks = [proto.SerializeToString().decode("utf-8", errors="replace")]

    def walk(message: Any) -> None:
        if isinstance(message, Payload):
            chunks.append(message.data.decode("utf-8", errors="replace"))
            return
        for descriptor, value in message.ListFields():
            if descriptor.message_type is None:
                continue
            if descriptor.message_type.GetOptions().map_entry:
                children = list(value.values())
            elif isinstance(value, Message):
                children = [value]
            else:
                children = list(value)
            for child in children:
                if hasattr(child, "ListFields"):
                    walk(child)

    for event in proto.events:
        walk(event)
    return "\n".join(chunks)


def base64_forms(secret: str) -> list[str]:
    """The secret as it shows inside any base64 text, at each of the three byte alignments."""
    raw = secret.encode()
    forms = []
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw).decode()
        first = -(-8 * pad // 6)  # the first character made of the secret's bits only
        last = 8 * (pad + len(raw)) // 6  # and the end of the last such character
        forms.append(encoded[first:last])
    return forms


def assert_no_key_in_history(history: WorkflowHistory, *, must_contain: str) -> None:
    as_json = history.to_json()  # payload data appears base64-encoded here
    decoded = history_text(history)
    # The check can see payload contents at all (else "no key found" would prove nothing).
    assert must_contain in decoded
    assert any(form in as_json for form in base64_forms(must_contain))
    for text in (as_json, decoded):
        assert API_KEY not in text
        for form in base64_forms(API_KEY):
            assert form not in text


def gap(requests: list[RecordedRequest], first: int, second: int) -> float:
    return requests[second].at - requests[first].at


# -- the fake's bodies are what the installed openai client expects --------------------------


def test_fake_bodies_validate_against_openai_types() -> None:
    call = Response.model_validate(function_call_response("search_source", SEARCH_ARGS))
    assert call.output[0].type == "function_call"
    message = Response.model_validate(message_response("hello"))
    assert message.output_text == "hello"
    assert message.usage is not None
    assert message.usage.total_tokens == 18
    tool_turn = ChatCompletion.model_validate(chat_tool_call_completion("x", {"a": 1}))
    assert tool_turn.choices[0].message.tool_calls
    text_turn = ChatCompletion.model_validate(chat_text_completion("hi"))
    assert text_turn.choices[0].message.content == "hi"


# -- a) openai:<model> happy path ---------------------------------------------------------


async def test_openai_route_tool_call_then_answer(
    client: Client, task_queue: str, migrated_database: str, fake: FakeOpenAI
) -> None:
    answer = "RetryPolicy is defined in temporalio/common.py."
    fake.reply(function_call_response("search_source", SEARCH_ARGS, call_id="call_search_1"))
    fake.reply(message_response(answer))
    run = spec(f"openai:{MODEL}")
    async with openai_worker(client, task_queue, migrated_database, fake):
        handle = await start(client, run, task_queue)
        result = await handle.result()
        state = await handle.query("get_state", result_type=RunState)

    assert result.status is RunStatus.COMPLETED
    assert result.final_output == answer
    assert state.status is RunStatus.COMPLETED
    assert result.usage.steps == 2
    assert result.usage.tool_calls == 1
    assert result.usage.input_tokens == 22
    assert result.usage.output_tokens == 14

    requests = fake.requests
    assert [r.path for r in requests] == [RESPONSES, RESPONSES]
    assert all(r.headers["authorization"] == f"Bearer {API_KEY}" for r in requests)
    first, second = requests[0].body, requests[1].body
    assert first["model"] == MODEL
    assert second["model"] == MODEL
    assert first["input"] == [{"role": "user", "content": run.input}]
    assert {t["name"] for t in first["tools"]} >= {"search_source", "read_definition"}

    expected = await real_tool_output("search_source", SEARCH_ARGS)
    assert "common.py:" in expected
    assert "class RetryPolicy" in expected
    outputs = function_call_outputs(requests[1])
    assert outputs == [
        {"type": "function_call_output", "call_id": "call_search_1", "output": expected}
    ]
    calls = [i for i in second["input"] if i.get("type") == "function_call"]
    assert len(calls) == 1
    assert calls[0]["call_id"] == "call_search_1"
    assert json.loads(calls[0]["arguments"]) == SEARCH_ARGS
    called = [e.data["tool"] for e in state.last_events if e.type == "ToolCalled"]
    assert called == ["search_source"]

    # The agent's context is in history once: the second turn names it by digest, and the
    # provider still got the same instructions and tools.
    assert second["instructions"] == first["instructions"]
    assert json.dumps(second["tools"]) == json.dumps(first["tools"])  # byte for byte: prompt caches
    history = await handle.fetch_history()
    turns = [
        json.loads(e.activity_task_scheduled_event_attributes.input.payloads[0].data)
        for e in history.events
        if e.activity_task_scheduled_event_attributes.activity_type.name == MODEL_TURN_ACTIVITY
    ]
    assert [t["context_elided"] for t in turns] == [False, True]
    assert turns[0]["tools"]
    assert not turns[1]["tools"]
    assert turns[1]["system_instructions"] is None
    assert turns[0]["context_digest"] == turns[1]["context_digest"]


# -- b) 429 + retry-after is honoured -----------------------------------------------------


@pytest.mark.parametrize(
    ("header", "value", "seconds"),
    [("retry-after", "1", 1.0), ("retry-after", "3", 3.0), ("retry-after-ms", "1500", 1.5)],
)
async def test_rate_limit_honours_retry_after(
    client: Client,
    task_queue: str,
    migrated_database: str,
    fake: FakeOpenAI,
    header: str,
    value: str,
    seconds: float,
) -> None:
    fake.plan(
        PlannedReply(
            429,
            error_body("Rate limit reached", type_="requests", code="rate_limit_exceeded"),
            {header: value},
        )
    )
    fake.reply(message_response("after the rate limit"))
    run = spec(f"openai:{MODEL}")
    async with openai_worker(client, task_queue, migrated_database, fake):
        handle = await start(client, run, task_queue)
        result = await handle.result()

    assert result.status is RunStatus.COMPLETED
    assert result.final_output == "after the rate limit"
    requests = fake.requests
    assert [r.status for r in requests] == [429, 200]
    waited = gap(requests, 0, 1)
    print(f"429 {header}={value}: next request after {waited:.2f}s")
    # Temporal's own first backoff is 1 s: only honouring the header explains >= 1.3 s or >= 2.8 s.
    assert waited >= seconds - 0.2, f"retried after {waited:.2f}s, {header}={value}"
    assert waited < seconds + 3.0, f"retried after {waited:.2f}s, {header}={value}"


# -- c) 400 is not retried and fails the run as model_error ---------------------------------


async def test_bad_request_fails_run_without_retry(
    client: Client, task_queue: str, migrated_database: str, fake: FakeOpenAI
) -> None:
    fake.reply(
        error_body("Invalid value for 'model'.", code="invalid_value"),
        status=400,
    )
    fake.reply(message_response("must never be requested"))
    run = spec(f"openai:{MODEL}")
    async with openai_worker(client, task_queue, migrated_database, fake):
        handle = await start(client, run, task_queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        state = await handle.query("get_state", result_type=RunState)
        history = await handle.fetch_history()

    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "RunFailed.model_error"
    assert cause.non_retryable
    assert "400" in str(cause)
    assert state.status is RunStatus.FAILED
    assert state.failure_reason is FailureReason.MODEL_ERROR
    assert state.failure_message is not None
    assert "HTTP 400" in state.failure_message
    assert "Invalid value for 'model'." in state.failure_message
    assert fake.count() == 1
    assert fake.pending == 1
    assert_no_key_in_history(history, must_contain="Invalid value for 'model'.")


async def test_bad_request_with_junk_retry_after_is_still_not_retried(
    client: Client, task_queue: str, migrated_database: str, fake: FakeOpenAI
) -> None:
    """A header the classifier cannot use must not replace the 400's own posture."""
    fake.reply(error_body("Bad request."), status=400, headers={"retry-after": "inf"})
    fake.reply(message_response("must never be requested"))
    run = spec(f"openai:{MODEL}")
    async with openai_worker(client, task_queue, migrated_database, fake):
        handle = await start(client, run, task_queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()

    assert isinstance(failure.value.cause, ApplicationError)
    assert failure.value.cause.type == "RunFailed.model_error"
    assert fake.count() == 1


# -- d) transient 5xx are retried by Temporal ------------------------------------------------


async def test_server_errors_are_retried(
    client: Client, task_queue: str, migrated_database: str, fake: FakeOpenAI
) -> None:
    for _ in range(2):
        fake.reply(error_body("The server had an error", type_="server_error"), status=500)
    fake.reply(message_response("third time lucky"))
    run = spec(f"openai:{MODEL}")
    async with openai_worker(client, task_queue, migrated_database, fake):
        handle = await start(client, run, task_queue)
        result = await handle.result()

    assert result.status is RunStatus.COMPLETED
    assert result.final_output == "third time lucky"
    requests = fake.requests
    assert [r.status for r in requests] == [500, 500, 200]
    assert result.usage.steps == 1
    # Temporal's retry policy (1 s, then 2 s), not the openai client's own retries (off).
    assert gap(requests, 0, 1) >= 0.8
    assert gap(requests, 1, 2) >= 1.8


# -- e) openai-compatible:<base-url>|<model> over chat completions ----------------------------


async def test_openai_compatible_route_over_chat_completions(
    client: Client, task_queue: str, migrated_database: str, fake: FakeOpenAI
) -> None:
    fake.reply(chat_tool_call_completion("search_source", SEARCH_ARGS, call_id="call_local_1"))
    fake.reply(chat_text_completion("Found it in common.py."))
    run = spec(f"openai-compatible:{fake.base_url}|local-model")
    async with openai_worker(client, task_queue, migrated_database, fake):
        handle = await start(client, run, task_queue)
        result = await handle.result()

    assert result.status is RunStatus.COMPLETED
    assert result.final_output == "Found it in common.py."
    assert result.usage.tool_calls == 1
    requests = fake.requests
    assert [r.path for r in requests] == [CHAT, CHAT]
    assert all(r.body["model"] == "local-model" for r in requests)
    # The route (and so the URL) comes from the run request: the OpenAI key must not go there.
    assert all("test-key" not in r.headers.get("authorization", "") for r in requests)
    messages = requests[1].body["messages"]
    tool_messages = [m for m in messages if m.get("role") == "tool"]
    expected = await real_tool_output("search_source", SEARCH_ARGS)
    assert tool_messages == [{"role": "tool", "tool_call_id": "call_local_1", "content": expected}]
    assistant = [m for m in messages if m.get("role") == "assistant"]
    assert assistant[0]["tool_calls"][0]["id"] == "call_local_1"
    assert assistant[0]["tool_calls"][0]["function"]["name"] == "search_source"


# -- f) the API key never reaches workflow history -----------------------------------------


async def test_api_key_stays_out_of_history(
    client: Client, task_queue: str, migrated_database: str, fake: FakeOpenAI
) -> None:
    fake.reply(function_call_response("search_source", SEARCH_ARGS))
    fake.reply(
        error_body("Rate limit reached", type_="requests", code="rate_limit_exceeded"),
        status=429,
        headers={"retry-after-ms": "200"},
    )
    fake.reply(message_response("done, and no secrets"))
    run = spec(f"openai:{MODEL}")
    async with openai_worker(client, task_queue, migrated_database, fake):
        handle = await start(client, run, task_queue)
        result = await handle.result()
        history = await handle.fetch_history()

    assert result.status is RunStatus.COMPLETED
    assert fake.count() == 3
    print(f"429 retry-after-ms=200: next request after {gap(fake.requests, 1, 2):.2f}s")
    assert all(r.headers["authorization"] == f"Bearer {API_KEY}" for r in fake.requests)
    assert_no_key_in_history(history, must_contain="done, and no secrets")


# -- f) the flagship pipeline on the openai route ------------------------------------------


async def test_research_pipeline_runs_on_the_openai_route(
    client: Client, task_queue: str, migrated_database: str, fake: FakeOpenAI, tmp_path: Any
) -> None:
    """`groundwork demo --model openai:<model>`: branches and editor on the real client."""
    from adapters.source_trees import open_tree
    from contracts.approvals import DecisionResult, Verdict, signed_decision
    from contracts.research import ResearchSpec, ResearchState, SourceTree
    from workers.research_client import start_research

    pattern = "^class \\w*Error\\b"
    hit = open_tree("package:structlog").search(pattern, 1)[0]  # "path:line: text", real
    fake.reply(
        function_call_response(
            "search_tree", {"source": "package:structlog", "pattern": pattern}, call_id="c1"
        )
    )
    fake.reply(message_response(f"{hit}\nnot/a/file.py:3: invented"))
    fake.reply(message_response("structlog signals misconfiguration with its own error type. [E1]"))
    research = ResearchSpec(
        run_id=f"oa-{task_queue[-10:]}",
        question="How does structlog report configuration errors?",
        article_id=f"oa-{task_queue[-10:]}",
        sources=[SourceTree(repo_id="structlog", package="structlog")],
        branch_route=f"openai:{MODEL}",
        editor_route=f"openai:{MODEL}",
    )
    approvers = {"erin": {"secret": "k", "roles": ["editor"]}}
    targets = {"docs-site": {"kind": "git", "path": str(tmp_path / "docs")}}
    async with running_worker(
        client, task_queue, migrated_database, openai_api_key=API_KEY,
        openai_base_url=fake.base_url, targets=targets, approvers=approvers,
    ):  # fmt: skip
        handle = await start_research(client, research, task_queue)
        for _ in range(200):
            state = await handle.query("get_state", result_type=ResearchState)
            if state.pending_approval is not None:
                break
            await asyncio.sleep(0.1)
        pending = state.pending_approval
        assert pending is not None
        assert state.branches["structlog"].rejected_citations == 1  # the invented line
        decision = signed_decision(pending, Verdict.APPROVE, "erin", "k")
        answer = await handle.execute_update(
            "decide_approval", decision, result_type=DecisionResult
        )
        assert answer.accepted
        result = await handle.result()
        final = await handle.query("get_state", result_type=ResearchState)
    assert result.status is RunStatus.COMPLETED
    assert final.verification is not None
    assert final.verification.verified
    assert [r.path for r in fake.requests] == [RESPONSES] * 3
    assert fake.requests[0].body["model"] == MODEL
    assert "source: package:structlog" in fake.requests[0].body["input"][0]["content"]
    assert "[E1]" in fake.requests[2].body["input"][0]["content"]  # the editor saw the evidence
