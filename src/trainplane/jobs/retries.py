"""A job's restart budget (``retries.max_restarts``), and what happens after an
attempt fails: another attempt after a backoff, or the end.

One budget, however a restart happens: an attempt that ran and failed (or was
lost) and was followed by another one used a restart, and so did every restart
Ray Train made in place within an attempt (its worker group restarted after a
worker failed, or its placement retried). A preempted, cancelled or
never-started attempt uses none.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_BACKOFF_SECONDS = 3600.0


@dataclass(frozen=True)
class RestartsUsed:
    """What a job's attempts have spent of its budget."""

    failed_attempts: int = 0  # attempts that ran and then failed or were lost
    in_place: int = 0  # restarts Ray Train made within attempts

    @property
    def before_next_attempt(self) -> int:
        """Restarts used, as the next attempt starts: every failed attempt
        was followed by another (this one), so each used a restart."""
        return self.failed_attempts + self.in_place


def restarts_left(max_restarts: int, used: int) -> int:
    """What an attempt may still spend in place, after ``used``."""
    return max(0, max_restarts - used)


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    delay_seconds: float
    restarts_used: int  # in all, including the one this decision grants


def after_failure(
    *,
    max_restarts: int,
    failures_so_far: int,
    backoff_seconds: float,
    in_place_restarts: int = 0,
) -> RetryDecision:
    """``failures_so_far`` counts failed attempts including the one that just
    ended; ``in_place_restarts`` those of all attempts, that one's included.
    Delays double with each restart, from ``backoff_seconds``, capped at an
    hour."""
    spent = failures_so_far + in_place_restarts  # with the restart this failure asks for
    if spent > max_restarts:
        return RetryDecision(retry=False, delay_seconds=0.0, restarts_used=spent - 1)
    delay = min(MAX_BACKOFF_SECONDS, backoff_seconds * 2 ** (spent - 1))
    return RetryDecision(retry=True, delay_seconds=delay, restarts_used=spent)
