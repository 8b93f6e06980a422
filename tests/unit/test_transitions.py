"""The run state machine: legal transitions pass, every other one raises."""

from __future__ import annotations

import itertools

import pytest

from contracts.status import (
    LEGAL_TRANSITIONS,
    TERMINAL_STATUSES,
    IllegalTransitionError,
    RunStatus,
    check_transition,
)


def test_table_covers_every_status() -> None:
    assert set(LEGAL_TRANSITIONS) == set(RunStatus)


@pytest.mark.parametrize("status", sorted(TERMINAL_STATUSES))
def test_terminal_statuses_have_no_way_out(status: RunStatus) -> None:
    assert LEGAL_TRANSITIONS[status] == frozenset()
    for target in RunStatus:
        with pytest.raises(IllegalTransitionError):
            check_transition(status, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [(c, t) for c, t in itertools.product(RunStatus, RunStatus) if t in LEGAL_TRANSITIONS[c]],
)
def test_legal_transitions_pass(current: RunStatus, target: RunStatus) -> None:
    check_transition(current, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (RunStatus.COMPLETED, RunStatus.RUNNING),
        (RunStatus.FAILED, RunStatus.RUNNING),
        (RunStatus.CANCELLED, RunStatus.COMPLETED),
        (RunStatus.CREATED, RunStatus.COMPLETED),
        (RunStatus.CREATED, RunStatus.WAITING),
        (RunStatus.WAITING, RunStatus.COMPLETED),
        (RunStatus.RUNNING, RunStatus.RUNNING),
        (RunStatus.RUNNING, RunStatus.CREATED),
    ],
)
def test_illegal_transitions_raise_with_a_clear_message(
    current: RunStatus, target: RunStatus
) -> None:
    with pytest.raises(IllegalTransitionError) as err:
        check_transition(current, target)
    assert f"{current.value} -> {target.value}" in str(err.value)


def test_a_waiting_run_must_resume_before_it_completes() -> None:
    check_transition(RunStatus.WAITING, RunStatus.RUNNING)
    check_transition(RunStatus.RUNNING, RunStatus.COMPLETED)
