"""The wait bound's pure rules: sizes learned from finished jobs, the work a
job is expected to hold still, the first-come-first-served wait and a high
quantile of them in a sliding window, and promotion once a job passes it."""

from __future__ import annotations

import pytest

from trainplane.jobs.placement import Demand
from trainplane.jobs.service_queues import HOUR, QueuedJob, ServiceRules, rank_queue, starved
from trainplane.jobs.wait_bounds import (
    DEFAULT_GPU_SECONDS_PER_GPU,
    JobSizes,
    RecentWaits,
    SizeTally,
    expected_left,
    fifo_wait_seconds,
    learn_sizes,
    quantile_index,
    wait_bound_seconds,
)

RULES = ServiceRules()


def test_sizes_are_learned_by_project_with_the_overall_mean_for_a_new_project():
    sizes = learn_sizes([("a", 10.0), ("a", 30.0), ("b", 80.0)])
    assert sizes.by_project == {"a": 20.0, "b": 80.0}
    assert sizes.overall == pytest.approx(40.0)
    assert sizes.expected_gpu_seconds("a", 4) == 20.0
    assert sizes.expected_gpu_seconds("new", 4) == pytest.approx(40.0)
    # Nothing finished yet: an hour on its GPUs.
    assert JobSizes().expected_gpu_seconds("a", 2) == 2 * DEFAULT_GPU_SECONDS_PER_GPU


def test_a_tally_learns_as_jobs_finish():
    tally = SizeTally()
    assert tally.sizes() == JobSizes()
    tally.add("a", 10.0)
    tally.add("a", 20.0)
    assert tally.sizes().by_project == {"a": 15.0}


def test_a_job_that_ran_past_its_expected_size_is_expected_to_run_as_long_again():
    sizes = JobSizes({"a": 100.0}, 100.0)
    left = {
        attained: expected_left(sizes, project_id="a", gpus=1, attained_gpu_seconds=attained)
        for attained in (0.0, 30.0, 50.0, 300.0)
    }
    assert left == {0.0: 100.0, 30.0: 70.0, 50.0: 50.0, 300.0: 300.0}


def test_the_fifo_wait_is_the_work_ahead_over_the_gpus():
    assert fifo_wait_seconds(8 * HOUR, 4) == 2 * HOUR
    assert fifo_wait_seconds(8 * HOUR, 0) == 0.0


def test_the_bound_is_the_longest_recent_fifo_wait_times_the_factor_and_at_least_the_floor():
    assert wait_bound_seconds(None, RULES) is None
    assert wait_bound_seconds(10 * HOUR, RULES) == 10 * HOUR
    assert wait_bound_seconds(60.0, RULES) == RULES.fifo_wait_floor_seconds
    assert wait_bound_seconds(10 * HOUR, ServiceRules(fifo_wait_factor=1.5)) == 15 * HOUR
    assert wait_bound_seconds(10 * HOUR, ServiceRules(fifo_wait_factor=0)) is None


def test_the_longest_recent_wait_forgets_what_left_the_window():
    recent = RecentWaits(window_seconds=100.0)
    assert recent.longest(0.0) is None
    recent.add(0.0, 50.0)
    recent.add(10.0, 20.0)
    recent.add(20.0, 30.0)
    assert recent.longest(20.0) == 50.0
    assert recent.longest(105.0) == 30.0  # the 50 s wait was submitted at 0
    assert recent.longest(121.0) is None


def test_the_quantile_index_is_the_maximum_until_there_are_enough_values_to_tell():
    assert quantile_index(1, 0.999) == 0
    assert quantile_index(1000, 0.999) == 999  # the largest of a thousand
    assert quantile_index(1001, 0.999) == 999  # the second largest of 1,001
    assert quantile_index(10, 0.5) == 5
    assert quantile_index(10, 1.0) == 9
    assert quantile_index(100, 0.29) == 29  # 0.29 x 100 is 28.999... in floating point


def test_a_burst_of_high_estimates_does_not_set_the_bound_past_the_quantile():
    recent = RecentWaits(window_seconds=100 * HOUR, quantile=0.99)
    for i in range(199):
        recent.add(float(i), (i % 50) * HOUR)  # waits of 0 to 49 h
    recent.add(200.0, 500 * HOUR)  # two jobs of one burst, each estimated at 500 h
    recent.add(201.0, 500 * HOUR)
    assert recent.longest(300.0) == 49 * HOUR  # the 99th percentile of 201 skips the two
    recent.add(202.0, 500 * HOUR)  # a third is past the top 1%: now it sets the bound
    assert recent.longest(300.0) == 500 * HOUR
    # Every estimate leaves the window in time, the burst's last.
    assert recent.longest(100 * HOUR + 201.5) == 500 * HOUR
    assert recent.longest(100 * HOUR + 203.0) is None


def _queued(job_id, *, project, submitted, attained=0.0, waited=0.0):
    return QueuedJob(Demand(job_id, 1, project_id=project), 50, submitted, attained, waited)


def test_a_job_past_the_wait_bound_goes_before_every_level_and_holds_the_reservation():
    jobs = [
        _queued("long", project="a", submitted=0, attained=50 * HOUR, waited=9 * HOUR),
        _queued("short", project="b", submitted=5),
    ]
    plain = rank_queue(jobs, RULES, in_use={}, weights={})
    assert [d.job_id for d in plain.order] == ["short", "long"]
    bounded = rank_queue(jobs, RULES, in_use={}, weights={}, wait_bound_seconds=8 * HOUR)
    assert [d.job_id for d in bounded.order] == ["long", "short"]
    assert bounded.promoted == {"long"} and "long" in bounded.pinned
    # The bound is never looser than the starvation backstop.
    backstop = ServiceRules(starve_after_seconds=4 * HOUR)
    assert starved(1, 50 * HOUR, 5 * HOUR, backstop, 8 * HOUR)
    assert not starved(1, 50 * HOUR, 5 * HOUR, RULES, 8 * HOUR)
