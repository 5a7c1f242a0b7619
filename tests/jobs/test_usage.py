"""GPU-hours and cost from attempt spans."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from trainplane.jobs.usage import AttemptSpan, cost, gpu_hours, lost_gpu_hours

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_gpu_hours_add_up_over_attempts_and_skip_those_that_never_ran():
    spans = [
        AttemptSpan(4, T0, T0 + timedelta(minutes=30), price_per_gpu_hour=2.0),
        AttemptSpan(4, None, None, price_per_gpu_hour=2.0),  # lost before it ran
        AttemptSpan(4, T0 + timedelta(hours=1), T0 + timedelta(hours=2), price_per_gpu_hour=3.0),
    ]
    assert gpu_hours(spans, T0 + timedelta(hours=5)) == pytest.approx(2.0 + 4.0)
    assert cost(spans, T0 + timedelta(hours=5)) == pytest.approx(2.0 * 2.0 + 4.0 * 3.0)


def test_a_running_attempt_counts_until_now():
    span = AttemptSpan(2, T0, None)
    assert gpu_hours([span], T0 + timedelta(minutes=90)) == pytest.approx(3.0)


def test_lost_gpu_hours_are_those_of_replaced_attempts():
    first = AttemptSpan(4, T0, T0 + timedelta(minutes=30))
    second = AttemptSpan(4, T0 + timedelta(hours=1), T0 + timedelta(hours=2))
    now = T0 + timedelta(hours=5)
    assert lost_gpu_hours([first], now) == 0.0
    assert lost_gpu_hours([first, second], now) == pytest.approx(2.0)
    assert lost_gpu_hours([], now) == 0.0
