"""The effect gateway's dispatch activity: claim -> reconcile -> execute -> settle.

Safe for Temporal to retry at any point: the intent is durable before the external call,
a retry after an uncertain attempt reconciles with the target by effect key before it
sends anything, and only the attempt holding the current fence can settle.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import psycopg
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities._context import activity_logger
from activities._faults import CrashPlan, crash_plan
from activities._heartbeat import heartbeating
from activities.tool_call import find_tool
from adapters.ledger import AlreadySettled, Claimed, EffectLedger, KeyConflict, Settled
from adapters.targets import (
    Committed,
    NotCommitted,
    TargetConflictError,
    TargetRejectedError,
    TargetTransientError,
    TargetUnknownError,
    Unknown,
)
from adapters.targets.registry import TargetRegistry, UnknownTargetError
from contracts.effects import (
    EFFECT_DISPATCH_ACTIVITY,
    EFFECT_RESOLVE_ACTIVITY,
    Classification,
    EffectDispatchInput,
    EffectOutcome,
    EffectRecord,
    EffectResolveActivityInput,
    EffectStatus,
    PreparedCall,
)
from definitions import catalog
from definitions.governed import builder_of


def _ledger_unavailable(phase: str, effect_key: str, err: Exception) -> ApplicationError:
    """Retryable: the next attempt finds the row as this one left it and reconciles first."""
    return ApplicationError(
        f"effect ledger unavailable at {phase} of {effect_key}: {err}", type="LedgerUnavailable"
    )


def _from_record(record: EffectRecord, message: str, replayed: bool = False) -> EffectOutcome:
    classification = {
        EffectStatus.SUCCEEDED: Classification.DO_NOT_RETRY,
        EffectStatus.CONFLICT: Classification.DO_NOT_RETRY,
        EffectStatus.FAILED: Classification.DO_NOT_RETRY,
        EffectStatus.REQUIRES_HUMAN: Classification.HUMAN_RESOLUTION,
        EffectStatus.UNKNOWN: Classification.RECONCILE_FIRST,
        EffectStatus.DISPATCHING: Classification.RECONCILE_FIRST,
        EffectStatus.PREPARED: Classification.RETRY,
    }[record.status]
    return EffectOutcome(
        effect_key=record.effect_key,
        status=record.status,
        classification=classification,
        external_ref=record.external_ref,
        receipt=record.receipt,
        message=message,
        replayed=replayed,
        attempt=record.attempt,
    )


class EffectActivities:
    def __init__(self, ledger: EffectLedger, targets: TargetRegistry) -> None:
        self._ledger = ledger
        self._targets = targets
        self._agents: dict[str, Any] = {}

    @activity.defn(name=EFFECT_DISPATCH_ACTIVITY)
    async def dispatch(self, request: EffectDispatchInput) -> EffectOutcome:
        async with heartbeating():
            # Once an external call is in flight it is finished and recorded even if this
            # attempt is cancelled: abandoning it would only manufacture an `unknown`.
            return await asyncio.shield(self._dispatch(request))

    async def _dispatch(self, request: EffectDispatchInput) -> EffectOutcome:
        call = request.call
        info = activity.info()
        last_attempt = info.attempt >= request.max_attempts
        log = activity_logger(effect_key=call.effect_key, tool=call.tool_name, target=call.target)
        faults = crash_plan()
        faults.crash("before_intent")
        try:
            claim = await self._ledger.claim(call, info.attempt)
        except psycopg.OperationalError as err:  # PoolTimeout too: the database is away
            log.warning("effect_claim_failed", error=str(err), last_attempt=last_attempt)
            raise _ledger_unavailable("claim", call.effect_key, err) from err
        if isinstance(claim, KeyConflict):
            log.warning(
                "effect_conflict",
                existing_hash=claim.record.request_hash,
                request_hash=call.request_hash,
            )
            return EffectOutcome(
                effect_key=call.effect_key,
                status=EffectStatus.CONFLICT,
                classification=Classification.DO_NOT_RETRY,
                message=(
                    f"effect key {call.effect_key!r} was already used for a different request "
                    f"(status {claim.record.status.value}); nothing was sent"
                ),
            )
        if isinstance(claim, AlreadySettled):
            log.info("effect_already_settled", status=claim.record.status.value)
            return _from_record(
                claim.record, "already settled in the ledger; nothing was sent", replayed=True
            )
        assert isinstance(claim, Claimed)
        log = log.bind(effect_attempt=claim.attempt, fence=claim.fence)
        # A first claim is routine and its outcome line carries status_from; a re-claim
        # (the previous attempt died or lost its answer) is worth a line of its own.
        claimed_at = log.info if claim.previous_status is not EffectStatus.PREPARED else log.debug
        claimed_at(
            "effect_claimed", status_from=claim.previous_status.value, status_to="dispatching"
        )
        faults.crash("after_intent")

        async def settle(status: EffectStatus, via: str = "execute", **fields: Any) -> Settled:
            try:
                settled = await self._ledger.settle(
                    call.effect_key, claim.fence, status, run_id=call.run_id,
                    activity_attempt=info.attempt, **fields,
                )  # fmt: skip
            except psycopg.OperationalError as err:
                # What happened at the target is in this line only: the row stays
                # `dispatching`, so the retry reconciles by key before it sends anything.
                log.warning(
                    "effect_settle_failed", status_from=claim.previous_status.value,
                    wanted=status.value, via=via, external_ref=fields.get("external_ref"),
                    error=str(err), last_attempt=last_attempt,
                )  # fmt: skip
                raise _ledger_unavailable("settle", call.effect_key, err) from err
            # One line per outcome: the transition this attempt made (or was refused).
            routine = status is EffectStatus.SUCCEEDED and not settled.stale
            (log.info if routine else log.warning)(
                "effect_settled", status_from=claim.previous_status.value,
                status_to=settled.record.status.value, wanted=status.value, via=via,
                stale=settled.stale, external_ref=settled.record.external_ref,
                error=fields.get("error"), last_attempt=last_attempt,
            )  # fmt: skip
            return settled

        try:
            target = self._targets.get(call.target)
        except UnknownTargetError as err:
            settled = await settle(EffectStatus.FAILED, error=str(err))
            return _from_record(settled.record, str(err))

        if claim.previous_status in (EffectStatus.DISPATCHING, EffectStatus.UNKNOWN):
            found = await target.reconcile(call.effect_key)
            log.info("effect_reconciled", found=type(found).__name__)
            if isinstance(found, Committed):
                if found.request_hash and found.request_hash != call.request_hash:
                    settled = await settle(
                        EffectStatus.CONFLICT, via="reconcile",
                        error="target holds the key with another request",
                    )  # fmt: skip
                    return _from_record(
                        settled.record, "the target holds this key for a different request"
                    )
                settled = await settle(
                    EffectStatus.SUCCEEDED, via="reconcile", external_ref=found.external_ref,
                    receipt={"external_ref": found.external_ref, **found.details, "reconciled": True},
                    domain_event=call.domain_event,
                )  # fmt: skip
                return _from_record(settled.record, "found committed at the target; not sent again")
            if isinstance(found, Unknown):
                settled = await settle(
                    EffectStatus.REQUIRES_HUMAN, via="reconcile", error=f"reconcile: {found.reason}"
                )
                return _from_record(
                    settled.record, f"the target cannot tell whether it committed: {found.reason}"
                )
            assert isinstance(found, NotCommitted)

        if datetime.now(UTC) >= call.deadline:
            # Past its deadline a request is never sent, not even as a retry: what was meant
            # for then may be wrong now. Asking the target (above) was still allowed.
            when = call.deadline.isoformat(timespec="seconds")
            settled = await settle(EffectStatus.FAILED, error=f"deadline {when} passed; not sent")
            return _from_record(settled.record, f"not sent: its deadline ({when}) passed first")

        try:
            payload = self._payload(call)
        except (TypeError, ValueError) as err:
            settled = await settle(EffectStatus.FAILED, error=f"invalid arguments: {err}")
            return _from_record(settled.record, f"invalid arguments: {err}")

        try:
            receipt = await self._execute(target, call, payload, faults)
        except TargetConflictError as err:
            settled = await settle(EffectStatus.CONFLICT, error=str(err))
            return _from_record(settled.record, f"conflict at the target: {err}")
        except TargetRejectedError as err:
            settled = await settle(EffectStatus.FAILED, error=str(err))
            return _from_record(settled.record, f"rejected by the target: {err}")
        except TargetTransientError as err:
            status = EffectStatus.FAILED if last_attempt else EffectStatus.PREPARED
            settled = await settle(status, error=str(err))
            if last_attempt:
                return _from_record(settled.record, f"target kept failing: {err}")
            raise ApplicationError(
                f"target transient failure: {err}", type="EffectTransient"
            ) from err
        except TargetUnknownError as err:
            status = EffectStatus.REQUIRES_HUMAN if last_attempt else EffectStatus.UNKNOWN
            settled = await settle(status, error=str(err))
            if last_attempt:
                return _from_record(settled.record, f"outcome unknown after retries: {err}")
            # The next attempt reconciles with the target before it sends anything.
            raise ApplicationError(f"effect outcome unknown: {err}", type="EffectUnknown") from err

        faults.crash("after_target_commit")
        settled = await settle(
            EffectStatus.SUCCEEDED, external_ref=receipt.external_ref,
            receipt={"external_ref": receipt.external_ref, **receipt.details},
            domain_event=call.domain_event,
        )  # fmt: skip
        if settled.stale:
            return _from_record(settled.record, "a newer attempt owns this effect")
        faults.crash("after_settle")
        return _from_record(settled.record, "committed")

    async def _execute(
        self, target: Any, call: PreparedCall, payload: dict[str, Any], faults: CrashPlan
    ) -> Committed:
        if not faults.armed("after_send"):
            result: Committed = await target.execute(call.effect_key, call.request_hash, payload)
            return result
        sending = asyncio.ensure_future(target.execute(call.effect_key, call.request_hash, payload))
        await asyncio.sleep(0.2)  # the request is on the wire; die before reading the answer
        faults.crash("after_send")
        result = await sending
        return result

    def _payload(self, call: PreparedCall) -> dict[str, Any]:
        agent = self._agents.get(call.agent_name)
        if agent is None:  # building an Agent deep-copies and resolves type hints: once per name
            agent = self._agents[call.agent_name] = catalog.build(call.agent_name)
        tool = find_tool(agent, call.tool_name, call.owner_agent)
        builder = builder_of(tool) if tool is not None else None
        if builder is None:
            raise ValueError(f"agent {call.agent_name} has no governed tool {call.tool_name!r}")
        payload = builder(**call.arguments)
        if not isinstance(payload, dict):
            raise TypeError(
                f"{call.tool_name} must build a dict payload, got {type(payload).__name__}"
            )
        return payload

    @activity.defn(name=EFFECT_RESOLVE_ACTIVITY)
    async def resolve(self, request: EffectResolveActivityInput) -> EffectRecord:
        log = activity_logger(effect_key=request.resolution.effect_key)
        record = await self._ledger.resolve(
            request.run_id, request.resolution, request.domain_event
        )
        log.info(
            "effect_resolved",
            resolution=request.resolution.resolution.value,
            status_to=record.status.value,
        )
        return record
