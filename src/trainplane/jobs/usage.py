"""GPU time and its cost, from when a job's attempts ran."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class AttemptSpan:
    gpus: int
    started_at: datetime | None  # None: it never ran
    finished_at: datetime | None  # None: still running
    price_per_gpu_hour: float = 0.0

    def gpu_hours(self, now: datetime) -> float:
        if self.started_at is None:
            return 0.0
        end = self.finished_at or now
        return max(0.0, (end - self.started_at).total_seconds()) * self.gpus / 3600


def gpu_hours(spans: Iterable[AttemptSpan], now: datetime) -> float:
    return sum(span.gpu_hours(now) for span in spans)


def cost(spans: Iterable[AttemptSpan], now: datetime) -> float:
    return sum(span.gpu_hours(now) * span.price_per_gpu_hour for span in spans)


def lost_gpu_hours(spans: list[AttemptSpan], now: datetime) -> float:
    """GPU time of the attempts a later attempt replaced (after a failure, a
    lost cluster or a preemption): all but the last, in attempt order. An
    upper bound on the work redone: the part before each one's last
    checkpoint was kept."""
    return sum(span.gpu_hours(now) for span in spans[:-1])
