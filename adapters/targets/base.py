"""The contract every effect target honours.

A target is a real system (a git repository, an HTTP service, a directory). The effect
key is the business identity of the effect and doubles as the idempotency key: executing
the same key twice must never create a second effect, and `reconcile(key)` must tell
whether an effect with that key is already in the target, by asking the target itself.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Committed:
    """The target holds the effect; `external_ref` names it there (a tag, a URL, a path)."""

    external_ref: str
    request_hash: str | None = None
    """The request hash the target recorded with the key, when it records one."""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NotCommitted:
    """The target has no effect under this key: dispatching is safe."""


@dataclass(frozen=True)
class Unknown:
    """The target could not tell (unreachable, ambiguous): never dispatch blindly."""

    reason: str


Reconciliation = Committed | NotCommitted | Unknown


class TargetError(Exception):
    """Base of target failures; the subclass decides the retry posture."""


class TargetTransientError(TargetError):
    """Nothing was committed and retrying may succeed (5xx before commit, connection refused)."""


class TargetUnknownError(TargetError):
    """The request may or may not have committed (timeout, dropped connection after send)."""


class TargetConflictError(TargetError):
    """The key is already committed with a different request: never retry."""


class TargetRejectedError(TargetError):
    """The target refused the request for good (validation, permission): never retry."""


class EffectTarget(abc.ABC):
    """One destination for effects. Implementations must be safe to call from many workers."""

    name: str

    @abc.abstractmethod
    async def execute(
        self, effect_key: str, request_hash: str, payload: dict[str, Any]
    ) -> Committed:
        """Apply the effect under `effect_key` (the idempotency key) and return its receipt.

        Re-executing a key that is already committed with the same request returns the
        existing receipt; with a different request_hash it raises TargetConflictError.
        Raises TargetTransientError, TargetUnknownError or TargetRejectedError on failure.
        """

    @abc.abstractmethod
    async def reconcile(self, effect_key: str) -> Reconciliation:
        """Ask the target whether an effect with this key exists. Never applies anything."""

    async def close(self) -> None:
        """Release connections; default no-op."""
        return None
