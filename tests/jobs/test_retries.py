"""The retry policy and the one restart budget."""

from __future__ import annotations

from trainplane.jobs.retries import MAX_BACKOFF_SECONDS, RestartsUsed, after_failure, restarts_left


def test_no_restarts_means_the_first_failure_ends_it():
    decision = after_failure(max_restarts=0, failures_so_far=1, backoff_seconds=30)
    assert not decision.retry and decision.restarts_used == 0


def test_backoff_doubles_and_is_capped():
    delays = [
        after_failure(max_restarts=20, failures_so_far=n, backoff_seconds=30).delay_seconds
        for n in (1, 2, 3)
    ]
    assert delays == [30, 60, 120]
    capped = after_failure(max_restarts=20, failures_so_far=20, backoff_seconds=30)
    assert capped.delay_seconds == MAX_BACKOFF_SECONDS


def test_budget_runs_out():
    assert after_failure(max_restarts=2, failures_so_far=2, backoff_seconds=0).retry
    last = after_failure(max_restarts=2, failures_so_far=3, backoff_seconds=0)
    assert not last.retry and last.restarts_used == 2


def test_restarts_in_place_spend_the_same_budget():
    # Attempt 1 restarted its workers once in place, then failed: with
    # max_restarts 1 that was the one restart.
    last = after_failure(max_restarts=1, failures_so_far=1, backoff_seconds=0, in_place_restarts=1)
    assert not last.retry and last.restarts_used == 1
    granted = after_failure(
        max_restarts=3, failures_so_far=1, backoff_seconds=10, in_place_restarts=1
    )
    assert granted.retry and granted.restarts_used == 2 and granted.delay_seconds == 20


def test_the_next_attempt_gets_what_is_left_of_the_budget():
    used = RestartsUsed(failed_attempts=1, in_place=2)
    assert used.before_next_attempt == 3
    assert restarts_left(5, used.before_next_attempt) == 2
    assert restarts_left(2, used.before_next_attempt) == 0
