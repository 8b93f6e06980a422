"""The trigger service's HTTP API (FastAPI). One handler maps errors to status codes."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, Literal

import psycopg
import structlog
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ValidationError
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from adapters.approvals import ApproverConfig
from adapters.input_log import Conflict, InputLog
from adapters.ledger import EffectLedger
from adapters.pool import new_pool
from adapters.waits import WaitStore
from contracts.approvals import (
    ApprovalDecision,
    ApprovalRequest,
    DecisionResult,
    RevokeApprovalInput,
    Verdict,
    binding_mismatch,
    sign,
)
from contracts.effects import (
    EffectResolution,
    EffectResolutionResult,
    ResolveEffectInput,
    answer_after_run_ended,
    recorded_answer,
    resolution_problem,
)
from contracts.inputs import AgentInput, Caller, InputAccepted, InputKind, InputRecord
from contracts.run import RunState, workflow_id_for
from contracts.search_attributes import GW_AGENT, GW_STATUS, GW_TENANT
from contracts.session import SessionInputStatus, SessionState, session_workflow_id
from contracts.status import RunStatus
from trigger import github
from trigger.activation import Activator
from trigger.auth import RateLimiter, Unauthorized, caller_for_token, verify_webhook
from trigger.config import TriggerSettings
from trigger.policy import NOT_YET, ActivationPolicy
from workers.client import update_refusal

log = structlog.get_logger("groundwork.trigger")


def _event_json(event: dict[str, Any]) -> dict[str, Any]:
    return {**event, "at": event["at"].isoformat()}


def _request_body(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI `requestBody` for a handler that reads and validates its body itself (so size
    limits and error messages stay ours), with the model's schema inlined."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inline(schema)}},
        }
    }


def _nul_at(value: Any, where: str) -> str | None:
    """Where the first NUL character is (Postgres text and jsonb cannot hold one), if any."""
    if isinstance(value, str):
        return where if "\x00" in value else None
    if isinstance(value, BaseModel):
        value = value.__dict__
    if isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in str(key):
                return f"{where}.{key!r}" if where else repr(key)
            found = _nul_at(item, f"{where}.{key}" if where else str(key))
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _nul_at(item, f"{where}.{i}")
            if found:
                return found
    return None


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class Control(BaseModel):
    """POST /v1/runs/{id}/controls. Approvals name what they approve (revision, content hash)."""

    action: Literal["approve", "reject", "revoke", "cancel", "resolve_effect"]
    approval_id: str | None = None
    revision: str | None = None
    content_hash: str | None = None
    reason: str = ""
    effect_key: str | None = None
    resolution: EffectResolution | None = None
    external_ref: str | None = None


class ControlResult(BaseModel):
    accepted: bool
    message: str
    input_id: str | None
    """The control input this request was logged as; None when nothing was logged (a
    resolve_effect repeated after its run ended: the ledger's recorded answer)."""


def create_app(
    settings: TriggerSettings,
    *,
    database_url: str,
    temporal: Client,
    task_queue: str,
    approvers: dict[str, ApproverConfig],
    run_activator: bool = True,
) -> FastAPI:
    policy = ActivationPolicy.load(settings.policy) if settings.policy else ActivationPolicy()
    limiter = RateLimiter(settings.rate_per_s, settings.rate_burst)
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        pool = new_pool(database_url, min_size=2, max_size=16, wait_s=settings.db_wait_s)
        await pool.open(wait=True, timeout=30)
        state["inputs"] = InputLog(pool)
        state["waits"] = WaitStore(pool)
        state["ledger"] = EffectLedger(pool)
        activator = Activator(state["inputs"], state["waits"], temporal, policy, task_queue)
        # Everything alive now (imports, the app, the pool) lives as long as the process: keep
        # it out of the cyclic GC. Measured: without this a full collection walked ~235k
        # startup objects every ~0.6 s under load, stalling every request for ~75 ms.
        gc.collect()
        gc.freeze()
        task = (
            asyncio.create_task(activator.forever(settings.activation_interval_s))
            if run_activator
            else None
        )
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
            await pool.close()

    app = FastAPI(
        title="Groundwork trigger service",
        version="1",
        lifespan=lifespan,
        description="The input plane (POST /v1/inputs) and the read API of Groundwork runs.",
    )

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, err: ApiError) -> JSONResponse:
        return JSONResponse({"error": err.message}, status_code=err.status, headers=err.headers)

    @app.exception_handler(psycopg.OperationalError)
    async def _database_away(_: Request, err: psycopg.OperationalError) -> JSONResponse:
        # The database is restarting or unreachable (PoolTimeout is one of these). Whatever
        # the request was, repeating it is safe: an input is deduplicated by its
        # source_event_id, and a control by the hash of its body.
        log.warning("database_unavailable", error=str(err).splitlines()[0] if str(err) else "")
        return JSONResponse(
            {"error": "database unavailable; retry (a repeated input is deduplicated)"},
            status_code=503,
            headers={"Retry-After": "1"},
        )

    @app.exception_handler(psycopg.DataError)
    async def _data_error(_: Request, err: psycopg.DataError) -> JSONResponse:
        # A value Postgres cannot store or compare (e.g. NUL in a path parameter); the
        # statement failed, so its transaction stored nothing.
        return JSONResponse({"error": f"invalid value: {err}".splitlines()[0]}, status_code=422)

    def authenticate(request: Request) -> Caller:
        try:
            token, caller = caller_for_token(request.headers.get("authorization"), settings.tokens)
        except Unauthorized as err:
            raise ApiError(401, str(err), {"WWW-Authenticate": "Bearer"}) from err
        wait = limiter.take(token)
        if wait > 0:
            raise ApiError(
                429, "rate limit exceeded", {"Retry-After": str(max(1, round(wait + 0.5)))}
            )
        return caller

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > settings.max_body_bytes:
            raise ApiError(413, f"body over {settings.max_body_bytes} bytes")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > settings.max_body_bytes:
                raise ApiError(413, f"body over {settings.max_body_bytes} bytes")
        return bytes(body)

    def parse(model: type[BaseModel], body: bytes, request: Request) -> Any:
        content_type = request.headers.get("content-type", "").split(";")[0].strip()
        if content_type != "application/json":
            raise ApiError(415, "content type must be application/json")
        try:
            parsed = model.model_validate_json(body)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            raise ApiError(422, f"{where}: {first['msg']}") from err
        nul = _nul_at(parsed, "")
        if nul is not None:
            raise ApiError(422, f"{nul}: text must not contain NUL (\\u0000)")
        return parsed

    async def run_state(caller: Caller, run_id: str) -> RunState:
        """The run's state; tenancy is checked from search attributes, so no worker is needed
        to refuse a stranger, and a run whose worker is down still answers from them."""
        handle = temporal.get_workflow_handle(workflow_id_for(run_id))
        try:
            description = await handle.describe(rpc_timeout=timedelta(seconds=5))
        except RPCError as err:
            if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                raise ApiError(404, f"no run {run_id!r}") from err
            raise ApiError(503, f"Temporal unavailable: {err.message}") from err
        attributes = description.typed_search_attributes
        if attributes.get(GW_TENANT) != caller.tenant:
            raise ApiError(404, f"no run {run_id!r}")  # not 403: existence is not leaked
        try:
            run: RunState = await handle.query(
                "get_state", result_type=RunState, rpc_timeout=timedelta(seconds=3)
            )
            return run
        except (RPCError, WorkflowQueryFailedError):
            status = attributes.get(GW_STATUS) or RunStatus.CREATED.value
            return RunState(
                run_id=run_id,
                agent=attributes.get(GW_AGENT) or "",
                tenant=caller.tenant,
                status=RunStatus(status),
            )

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post(
        "/v1/inputs",
        status_code=202,
        response_model=InputAccepted,
        responses={200: {"model": InputAccepted}},
        openapi_extra=_request_body(AgentInput),
    )
    async def post_input(request: Request) -> JSONResponse:
        caller = authenticate(request)
        body = await read_body(request)
        envelope: AgentInput = parse(AgentInput, body, request)
        if envelope.kind is InputKind.CONTROL:
            raise ApiError(422, "kind: control inputs go through POST /v1/runs/{id}/controls")
        rule = policy.decide(envelope)
        if rule.action in NOT_YET:
            raise ApiError(
                501, f"disposition {rule.action.value} is not available yet; nothing was stored"
            )
        body_hash = hashlib.sha256(envelope.model_dump_json().encode()).hexdigest()
        outcome = await state["inputs"].accept(envelope, caller, body_hash)
        if isinstance(outcome, Conflict):
            raise ApiError(
                409,
                f"source_event_id {envelope.source_event_id!r} was used for another body ({outcome.public_id})",
            )
        status = 200 if outcome.duplicate else 202
        return JSONResponse(
            InputAccepted(input_id=outcome.public_id, duplicate=outcome.duplicate).model_dump(),
            status_code=status,
        )

    @app.post("/v1/webhooks/github", status_code=202, response_model=InputAccepted)
    async def github_webhook(request: Request) -> JSONResponse:
        """GitHub webhooks, verified by X-Hub-Signature-256 over the raw body."""
        body = await read_body(request)
        try:
            verify_webhook(
                "github", body, request.headers.get("x-hub-signature-256"), settings.webhook_secrets
            )
        except Unauthorized as err:
            raise ApiError(401, str(err)) from err
        delivery = request.headers.get("x-github-delivery")
        event = request.headers.get("x-github-event")
        if not delivery or not event:
            raise ApiError(422, "X-GitHub-Delivery and X-GitHub-Event headers are required")
        if event == "ping":
            return JSONResponse({"input_id": "", "duplicate": False}, status_code=200)
        try:
            payload = json.loads(body)
            envelope = github.normalize(
                event, delivery, payload if isinstance(payload, dict) else {}
            )
        except github.UnsupportedEvent as err:
            raise ApiError(422, str(err)) from err
        except (ValueError, ValidationError) as err:
            raise ApiError(422, f"not a GitHub {event} payload: {err}") from err
        caller = Caller(tenant=settings.webhook_tenant, principal="github", trust="untrusted")
        rule = policy.decide(envelope)
        if rule.action in NOT_YET:
            raise ApiError(
                501, f"disposition {rule.action.value} is not available yet; nothing was stored"
            )
        body_hash = hashlib.sha256(envelope.model_dump_json().encode()).hexdigest()
        outcome = await state["inputs"].accept(envelope, caller, body_hash)
        if isinstance(outcome, Conflict):
            raise ApiError(409, f"delivery {delivery} was already received with another body")
        return JSONResponse(
            InputAccepted(input_id=outcome.public_id, duplicate=outcome.duplicate).model_dump(),
            status_code=200 if outcome.duplicate else 202,
        )

    @app.get("/v1/inputs/{input_id}", response_model=InputRecord)
    async def get_input(input_id: str, request: Request) -> InputRecord:
        caller = authenticate(request)
        record: InputRecord | None = await state["inputs"].get(input_id, caller.tenant)
        if record is None:
            raise ApiError(404, f"no input {input_id!r}")
        record.run_refs = [r["run_id"] for r in record.activation_refs if r.get("run_id")]
        session_ref = next(
            (r for r in record.activation_refs if r.get("session_workflow_id")), None
        )
        if session_ref is not None:
            handle = temporal.get_workflow_handle(session_ref["session_workflow_id"])
            status: SessionInputStatus | None
            try:
                status = await handle.query(
                    "get_input", input_id, result_type=SessionInputStatus,
                    rpc_timeout=timedelta(seconds=3),
                )  # fmt: skip
            except (RPCError, WorkflowQueryFailedError):
                status = None  # no worker answers: the stored refs stand
            if status is not None and status.run_id:
                record.session = status
                record.run_refs = [status.run_id]
        return record

    @app.get("/v1/sessions/{session_id:path}", response_model=SessionState)
    async def get_session(session_id: str, request: Request) -> SessionState:
        """A session's active run, queue and recent runs. The workflow id is derived from the
        caller's tenant, so another tenant's session of the same name is never reached."""
        caller = authenticate(request)
        handle = temporal.get_workflow_handle(session_workflow_id(caller.tenant, session_id))
        try:
            session: SessionState = await handle.query(
                "get_state", result_type=SessionState, rpc_timeout=timedelta(seconds=5)
            )
        except RPCError as err:
            if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                raise ApiError(404, f"no session {session_id!r}") from err
            raise ApiError(503, f"Temporal unavailable: {err.message}") from err
        except WorkflowQueryFailedError as err:
            raise ApiError(503, f"session {session_id!r} did not answer: {err}") from err
        return session

    @app.get("/v1/runs/{run_id}", response_model=RunState)
    async def get_run(run_id: str, request: Request) -> RunState:
        return await run_state(authenticate(request), run_id)

    @app.get("/v1/runs/{run_id}/events")
    async def get_events(run_id: str, request: Request, after: int = 0, limit: int = 100) -> Any:
        """A JSON page after `after`; with `Accept: text/event-stream`, a live stream that
        resumes after `Last-Event-ID` and ends once the run has closed and everything is sent."""
        caller = authenticate(request)
        await run_state(caller, run_id)
        ledger: EffectLedger = state["ledger"]
        if "text/event-stream" in request.headers.get("accept", ""):
            last = request.headers.get("last-event-id")
            start = int(last) if last and last.isdigit() else after
            return StreamingResponse(
                _stream(ledger, run_id, start, request), media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )  # fmt: skip
        events = await ledger.events(run_id, after=after, limit=max(1, min(limit, 1000)))
        return {
            "events": [_event_json(e) for e in events],
            "next_cursor": events[-1]["cursor"] if events else after,
        }

    async def _stream(
        ledger: EffectLedger, run_id: str, cursor: int, request: Request
    ) -> AsyncIterator[bytes]:
        handle = temporal.get_workflow_handle(workflow_id_for(run_id))
        while not await request.is_disconnected():
            events = await ledger.events(run_id, after=cursor, limit=500)
            for event in events:
                cursor = event["cursor"]
                yield (
                    f"id: {cursor}\nevent: {event['type']}\n"
                    f"data: {json.dumps(_event_json(event), sort_keys=True)}\n\n"
                ).encode()
            if events:
                continue
            description = await handle.describe()
            if description.close_time is not None:
                # Closed: one more read catches anything committed just before the close.
                if not await ledger.events(run_id, after=cursor, limit=1):
                    yield b"event: end\ndata: {}\n\n"
                    return
                continue
            yield b": keep-alive\n\n"
            await asyncio.sleep(0.5)

    @app.post(
        "/v1/runs/{run_id}/controls",
        response_model=ControlResult,
        openapi_extra=_request_body(Control),
    )
    async def post_control(run_id: str, request: Request) -> ControlResult:
        caller = authenticate(request)
        body = await read_body(request)
        control: Control = parse(Control, body, request)
        run = await run_state(caller, run_id)
        if control.action == "resolve_effect":
            may_resolve(caller)
        if run.status.is_terminal:
            if control.action == "resolve_effect" and control.effect_key and control.resolution:
                return await answer_of_ended_run(run_id, control, caller)
            raise ApiError(409, f"run {run_id} has ended ({run.status.value}); nothing was stored")
        handle = temporal.get_workflow_handle(workflow_id_for(run_id))
        # Everything checkable here is checked before anything is written: a refused request
        # stores nothing. What passes is logged as a control input, then acts.
        pending = run.pending_approval
        decision: ApprovalDecision | None = None
        revoke_target: str | None = None
        if control.action == "resolve_effect":
            if not control.effect_key or control.resolution is None:
                raise ApiError(422, "resolve_effect needs effect_key and resolution")
            problem = resolution_problem(
                ResolveEffectInput(
                    effect_key=control.effect_key, resolution=control.resolution,
                    external_ref=control.external_ref,
                )
            )  # fmt: skip
            if problem is not None:
                raise ApiError(422, problem)
        elif control.action == "cancel":
            mine = run.principal is not None and run.principal == caller.principal
            if not mine and not set(caller.roles) & set(settings.cancel_roles):
                raise ApiError(
                    403,
                    f"{caller.principal} may not cancel run {run_id}: only who started it "
                    f"({run.principal or 'unknown'}) or one of the roles "
                    f"{', '.join(settings.cancel_roles) or '(none configured)'}",
                )
        elif control.action == "revoke":
            # Withdrawing an approval is an approver's decision, as giving it is.
            if caller.principal not in approvers:
                raise ApiError(403, f"{caller.principal} is not an approver")
            revoke_target = control.approval_id or (pending.approval_id if pending else None)
            if revoke_target is None:
                raise ApiError(409, "nothing to revoke: no approval given and none pending")
        elif control.action in ("approve", "reject"):
            decision = _signed_decision(control, caller, pending, run_id)

        envelope = AgentInput(
            source_event_id=f"control-{hashlib.sha256(body).hexdigest()[:32]}-{run_id}",
            kind=InputKind.CONTROL, type=f"control.{control.action}", source="trigger",
            subject=run_id, target=run_id, data=control.model_dump(mode="json"),
        )  # fmt: skip
        accepted = await state["inputs"].accept(envelope, caller, hashlib.sha256(body).hexdigest())
        try:
            return await _act(control, caller, handle, accepted.public_id, revoke_target, decision)
        except RPCError as err:  # the run closed after the check above; the control stays logged
            if err.status == RPCStatusCode.NOT_FOUND:
                raise ApiError(409, f"run {run_id} has ended: {err.message}") from err
            raise ApiError(503, f"Temporal unavailable: {err.message}") from err

    def may_resolve(caller: Caller) -> None:
        if not set(caller.roles) & set(settings.effect_resolver_roles):
            raise ApiError(
                403,
                f"{caller.principal} may not resolve effects: that needs one of the roles "
                f"{', '.join(settings.effect_resolver_roles) or '(none configured)'}",
            )

    async def answer_of_ended_run(run_id: str, control: Control, caller: Caller) -> ControlResult:
        """A resolve_effect after its run ended, as a retry whose response was lost sends:
        200 with the recorded result if the ledger holds this same answer, else 409."""
        assert control.effect_key is not None
        assert control.resolution is not None
        ledger: EffectLedger = state["ledger"]
        asked = ResolveEffectInput(
            effect_key=control.effect_key, resolution=control.resolution,
            external_ref=control.external_ref, principal=caller.principal,
        )  # fmt: skip
        record = await ledger.get(asked.effect_key)
        attempts = await ledger.attempts(asked.effect_key) if record else []
        verdict = answer_after_run_ended(run_id, asked, record, recorded_answer(attempts))
        if isinstance(verdict, str):
            raise ApiError(409, f"refused: {verdict}")
        return ControlResult(accepted=True, message=verdict.message, input_id=None)

    async def _act(
        control: Control, caller: Caller, handle: WorkflowHandle[Any, Any], input_id: str,
        revoke_target: str | None, decision: ApprovalDecision | None,
    ) -> ControlResult:  # fmt: skip
        if control.action == "cancel":
            await handle.cancel()
            return ControlResult(accepted=True, message="cancellation requested", input_id=input_id)
        if control.action == "resolve_effect":
            assert control.effect_key is not None
            assert control.resolution is not None
            try:
                resolved: EffectResolutionResult = await handle.execute_update(
                    "decide_effect",
                    ResolveEffectInput(effect_key=control.effect_key, resolution=control.resolution,
                                       external_ref=control.external_ref, principal=caller.principal, note=control.reason),
                    result_type=EffectResolutionResult,
                )  # fmt: skip
            except WorkflowUpdateFailedError as err:
                raise ApiError(409, f"refused: {update_refusal(err)}") from err
            return ControlResult(accepted=True, message=resolved.message, input_id=input_id)
        if revoke_target is not None:
            await handle.signal(
                "revoke",
                RevokeApprovalInput(
                    approval_id=revoke_target, principal=caller.principal, reason=control.reason
                ),
            )
            return ControlResult(
                accepted=True, message=f"revoke sent for {revoke_target}", input_id=input_id
            )
        assert decision is not None
        try:
            result: DecisionResult = await handle.execute_update(
                "decide_approval", decision, result_type=DecisionResult
            )
        except WorkflowUpdateFailedError as err:
            raise ApiError(409, f"refused: {update_refusal(err)}") from err
        if not result.accepted:
            raise ApiError(409, f"refused: {result.message}")
        return ControlResult(accepted=True, message=result.message, input_id=input_id)

    def _signed_decision(
        control: Control, caller: Caller, pending: ApprovalRequest | None, run_id: str
    ) -> ApprovalDecision:
        if pending is None:
            raise ApiError(409, f"run {run_id} has no pending approval")
        if control.revision is None or control.content_hash is None:
            raise ApiError(
                422, "approve and reject must name the revision and content_hash they decide on"
            )
        approver = approvers.get(caller.principal)
        if approver is None:
            raise ApiError(403, f"{caller.principal} is not an approver")
        unsigned = ApprovalDecision(
            approval_id=control.approval_id or pending.approval_id,
            verdict=Verdict.APPROVE if control.action == "approve" else Verdict.REJECT,
            principal=caller.principal, subject=pending.subject, revision=control.revision,
            content_hash=control.content_hash, destination=pending.destination, scope=pending.scope,
            reason=control.reason,
        )  # fmt: skip
        mismatch = binding_mismatch(pending, unsigned)
        if mismatch is not None:
            raise ApiError(409, f"refused: {mismatch}")
        return unsigned.model_copy(
            update={"signature": sign(unsigned, approver.secret.get_secret_value())}
        )

    return app
