"""The retry policy."""

from __future__ import annotations

from trainplane.jobs.retries import MAX_BACKOFF_SECONDS, after_failure


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
