"""The transition table itself: shape and reachability (pure, no database)."""

from __future__ import annotations

import pytest

from trainplane.jobs.states import (
    ALLOWED_TRANSITIONS,
    CANCEL_IMMEDIATELY,
    CANCEL_VIA_CLUSTER,
    SWEEP_TRANSITIONS,
    TERMINAL_STATUSES,
    JobStatus,
    is_allowed,
    transitions_for,
)

TABLES = pytest.mark.parametrize(
    "table", [ALLOWED_TRANSITIONS, SWEEP_TRANSITIONS], ids=["jobs", "sweeps"]
)


@TABLES
def test_every_status_has_a_row(table):
    assert set(table) == set(JobStatus)


@TABLES
def test_terminal_statuses_have_no_way_out(table):
    for status in TERMINAL_STATUSES:
        assert table[status] == frozenset()


@TABLES
def test_no_status_transitions_to_itself(table):
    for status, targets in table.items():
        assert status not in targets


def reachable_from(table, status):
    reachable, frontier = set(), {status}
    while frontier:
        for nxt in table[frontier.pop()] - reachable:
            reachable.add(nxt)
            frontier.add(nxt)
    return reachable


def test_every_live_status_can_reach_every_ending():
    for status in set(JobStatus) - TERMINAL_STATUSES:
        reachable, frontier = set(), {status}
        while frontier:
            for nxt in ALLOWED_TRANSITIONS[frontier.pop()] - reachable:
                reachable.add(nxt)
                frontier.add(nxt)
        assert reachable >= TERMINAL_STATUSES, f"{status} reaches only {reachable}"


def test_cancel_paths_are_allowed_transitions():
    for status in CANCEL_IMMEDIATELY:
        assert JobStatus.CANCELLED in ALLOWED_TRANSITIONS[status]
    for status in CANCEL_VIA_CLUSTER:
        assert JobStatus.CANCELLING in ALLOWED_TRANSITIONS[status]
    assert not (CANCEL_IMMEDIATELY & CANCEL_VIA_CLUSTER)
    assert not ((CANCEL_IMMEDIATELY | CANCEL_VIA_CLUSTER) & TERMINAL_STATUSES)


def test_sweeps_are_never_placed_and_cancel_through_their_trials():
    S = JobStatus
    placement = {S.STARTING, S.RESTARTING, S.QUEUED}
    assert all(not (targets & placement) for targets in SWEEP_TRANSITIONS.values())
    assert SWEEP_TRANSITIONS[S.QUEUED] == {S.RUNNING, S.CANCELLED, S.FAILED}
    assert SWEEP_TRANSITIONS[S.RUNNING] == {S.SUCCEEDED, S.FAILED, S.CANCELLING}
    assert SWEEP_TRANSITIONS[S.CANCELLING] == {S.CANCELLED}
    assert transitions_for("sweep") is SWEEP_TRANSITIONS
    assert transitions_for("finetune") is ALLOWED_TRANSITIONS
    assert is_allowed(S.QUEUED, S.RUNNING, "sweep") and not is_allowed(S.QUEUED, S.RUNNING)
    # A sweep is never STARTING or RESTARTING; once cancelling, it ends cancelled.
    assert not SWEEP_TRANSITIONS[S.STARTING] and not SWEEP_TRANSITIONS[S.RESTARTING]
    for status in (S.QUEUED, S.RUNNING):
        assert reachable_from(SWEEP_TRANSITIONS, status) >= TERMINAL_STATUSES
    assert reachable_from(SWEEP_TRANSITIONS, S.CANCELLING) == {S.CANCELLED}


def test_a_pruned_trial_ends_cancelled_from_a_live_status():
    for status in (JobStatus.STARTING, JobStatus.RUNNING):
        assert JobStatus.CANCELLED in ALLOWED_TRANSITIONS[status]
