"""The trace replay on small hand-made traces, where the right schedule can be
worked out by hand: backfill around a blocked gang, fair share between
projects, and the figures a replay is judged by."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainplane.simulation.replay import replay
from trainplane.simulation.summary import summarize
from trainplane.simulation.trace import TraceJob, read_philly


def job(name: str, submit: float, duration: float, gpus: int, project: str = "p") -> TraceJob:
    return TraceJob(name, submit, duration, gpus, project)


def starts(runs) -> dict[str, float]:
    return {run.job.id: run.first_start for run in runs}


# 7 of 8 GPUs busy until 100; a gang of 8 waits for them; a small short job
# arrives behind it.
BLOCKED_GANG = [job("a", 0, 100, 7), job("b", 1, 100, 8), job("c", 2, 10, 1)]


def test_fifo_blocks_the_small_job_behind_the_gang() -> None:
    runs = replay(BLOCKED_GANG, policy="fifo", gpus=8, gpus_per_node=8)
    assert starts(runs) == {"a": 0, "b": 100, "c": 200}


def test_trainplane_backfills_a_job_that_ends_before_the_reservation() -> None:
    runs = replay(BLOCKED_GANG, policy="trainplane", gpus=8, gpus_per_node=8)
    # c declares 20 s (2x its 10): done long before a's declared 200 s.
    assert starts(runs) == {"a": 0, "b": 100, "c": 2}


def test_without_runtime_estimates_a_gang_not_yet_starving_holds_no_one_back() -> None:
    runs = replay(BLOCKED_GANG, policy="trainplane", gpus=8, gpus_per_node=8, estimate_factor=0)
    # No one knows when a's GPUs free up, and b has not waited past the
    # starvation bound, which would pin a reservation to it: c takes the idle
    # GPU, and b still starts when a ends.
    assert starts(runs) == {"a": 0, "b": 100, "c": 2}


def test_fair_share_lets_a_second_project_in_ahead_of_a_flood() -> None:
    flood = [job(f"x{i}", 0, 10, 1, "x") for i in range(6)]
    trace = [*flood, job("y", 1, 10, 1, "y")]
    fifo = starts(replay(trace, policy="fifo", gpus=2, gpus_per_node=2))
    ours = starts(replay(trace, policy="trainplane", gpus=2, gpus_per_node=2))
    assert fifo["y"] == 30  # behind all six of x's
    assert ours["y"] == 10  # the first GPU freed goes to the project with none


def test_jobs_larger_than_the_cluster_are_left_out() -> None:
    runs = replay(
        [job("big", 0, 5, 16), job("ok", 0, 5, 8)], policy="fifo", gpus=8, gpus_per_node=8
    )
    assert [run.job.id for run in runs] == ["ok"]


def test_the_summary_figures() -> None:
    runs = replay(BLOCKED_GANG, policy="fifo", gpus=8, gpus_per_node=8)
    summary = summarize(runs, gpus=8)
    # Completions: a 100, b 199, c 208 (seconds after each submit).
    assert summary.mean_jct_hours == pytest.approx((100 + 199 + 208) / 3 / 3600)
    assert summary.mean_wait_hours == pytest.approx((0 + 99 + 198) / 3 / 3600)
    assert summary.makespan_days == pytest.approx(210 / 86400)
    assert summary.utilization == pytest.approx((700 + 800 + 10) / (8 * 210))
    assert summary.fairness == pytest.approx(1.0)  # one project


def test_a_philly_file_is_read_in_submit_order_and_windowed(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-02 00:00:00,60.0,2,120.0,b\n"
        "2017-10-01 00:00:00,30.0,1,30.0,a\n"
        "2017-10-05 00:00:00,10.0,8,80.0,a\n"
    )
    jobs = read_philly(trace)
    assert [(j.submit, j.duration, j.gpus, j.project) for j in jobs] == [
        (0.0, 30.0, 1, "a"),
        (86400.0, 60.0, 2, "b"),
        (4 * 86400.0, 10.0, 8, "a"),
    ]
    assert len(read_philly(trace, days=2)) == 2
