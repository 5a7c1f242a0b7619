"""What happens after an attempt fails: another attempt after a backoff, or the end."""

from __future__ import annotations

from dataclasses import dataclass

MAX_BACKOFF_SECONDS = 3600.0


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    delay_seconds: float
    restarts_used: int  # including the one this decision grants


def after_failure(
    *, max_restarts: int, failures_so_far: int, backoff_seconds: float
) -> RetryDecision:
    """``failures_so_far`` counts failed attempts including the one that just
    ended. Delays double with each restart, from ``backoff_seconds``, capped at
    an hour."""
    if failures_so_far > max_restarts:
        return RetryDecision(retry=False, delay_seconds=0.0, restarts_used=failures_so_far - 1)
    delay = min(MAX_BACKOFF_SECONDS, backoff_seconds * 2 ** (failures_so_far - 1))
    return RetryDecision(retry=True, delay_seconds=delay, restarts_used=failures_so_far)
