"""The transition table itself: shape and reachability (pure, no database)."""

from __future__ import annotations

from trainplane.jobs.states import (
    ALLOWED_TRANSITIONS,
    CANCEL_IMMEDIATELY,
    CANCEL_VIA_CLUSTER,
    TERMINAL_STATUSES,
    JobStatus,
)


def test_every_status_has_a_row():
    assert set(ALLOWED_TRANSITIONS) == set(JobStatus)


def test_terminal_statuses_have_no_way_out():
    for status in TERMINAL_STATUSES:
        assert ALLOWED_TRANSITIONS[status] == frozenset()


def test_no_status_transitions_to_itself():
    for status, targets in ALLOWED_TRANSITIONS.items():
        assert status not in targets


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
