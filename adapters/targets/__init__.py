"""Effect targets: real systems a side effect lands in, each with execute and reconcile by key."""

from adapters.targets.base import (
    Committed,
    EffectTarget,
    NotCommitted,
    Reconciliation,
    TargetConflictError,
    TargetError,
    TargetRejectedError,
    TargetTransientError,
    TargetUnknownError,
    Unknown,
)

__all__ = [
    "Committed",
    "EffectTarget",
    "NotCommitted",
    "Reconciliation",
    "TargetConflictError",
    "TargetError",
    "TargetRejectedError",
    "TargetTransientError",
    "TargetUnknownError",
    "Unknown",
]
