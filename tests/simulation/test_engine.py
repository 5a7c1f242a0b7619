"""The replay engine on tiny hand-made traces whose right answer is worked out
by hand: what a preemption costs (the work since the last checkpoint, then a
restart overhead), the attained service a policy sees, passes at wake_at
times, and the figures a summary draws from it."""

from __future__ import annotations

import pytest

from trainplane.simulation.engine import Decision, SimJob, View, simulate
from trainplane.simulation.policies import Fifo
from trainplane.simulation.summary import summarize
from trainplane.simulation.trace import TraceJob


class Script:
    """A policy that does, at given times, what it is told, and FIFO at any
    other pass; it records every pass's time and the attained service of each
    running job it saw."""

    name = "script"

    def __init__(self, steps: dict[float, Decision]) -> None:
        self.steps = steps
        self.passes: list[float] = []
        self.seen: dict[float, dict[str, float]] = {}

    def decide(self, view: View) -> Decision:
        self.passes.append(view.now)
        self.seen[view.now] = {sim.id: sim.attained_gpu_seconds for sim in view.running}
        if view.now in self.steps:
            return self.steps[view.now]
        return Fifo().decide(view)


def by_id(sims: list[SimJob]) -> dict[str, SimJob]:
    return {sim.id: sim for sim in sims}


def test_a_preempted_job_loses_the_work_since_its_checkpoint_and_pays_a_restart() -> None:
    trace = [TraceJob("a", 0, 10_000, 2, "p"), TraceJob("b", 10, 500, 1, "p")]
    script = Script(
        {
            0: Decision(start=["a"], wake_at=5000),
            5000: Decision(preempt=["a"], wake_at=6000),
            6000: Decision(start=["a"]),
        }
    )
    finished = by_id(
        simulate(trace, script, gpus=2, gpus_per_node=2, estimate_factor=0, checkpoint_minutes=30)
    )
    a = finished["a"]
    # 5000 s of work: checkpoints at 1800 and 3600 keep 3600; 1400 s are lost.
    # The restart at 6000 pays 60 s, then does the 6400 s left.
    assert a.finished == 6000 + 60 + 6400
    assert a.done == 10_000
    assert a.preemptions == 1
    assert a.lost_gpu_seconds == (1400 + 60) * 2
    assert a.attained_gpu_seconds == (5000 + 60 + 6400) * 2
    assert a.waited == 1000
    assert a.first_start == 0
    # The policy saw a's service brought up to the moment of each pass.
    assert script.seen[5000] == {"a": 10_000}
    assert script.seen[10] == {"a": 20}
    # b waited for a's GPUs: it never got a start, so it ran after a finished.
    assert finished["b"].first_start == a.finished


def test_a_job_preempted_during_its_restart_loses_only_that() -> None:
    trace = [TraceJob("a", 0, 4000, 1, "p")]
    script = Script(
        {
            0: Decision(start=["a"], wake_at=2000),
            2000: Decision(preempt=["a"], start=["a"], wake_at=2030),
            2030: Decision(preempt=["a"], start=["a"]),
        }
    )
    (a,) = simulate(trace, script, gpus=1, gpus_per_node=1, estimate_factor=0)
    # 2000 s keep the 1800 checkpoint; the second run only paid 30 of its 60 s.
    assert a.preemptions == 2
    assert a.lost_gpu_seconds == 200 + 30 + 60
    assert a.finished == 2030 + 60 + 2200
    assert a.waited == 0  # restarted in the same pass each time


def test_passes_run_at_wake_times_once_each() -> None:
    trace = [TraceJob("a", 0, 100, 1, "p"), TraceJob("b", 10, 100, 1, "p")]
    script = Script(
        {
            0: Decision(wake_at=50),
            10: Decision(wake_at=50),  # asked twice: one pass
            50: Decision(start=["a", "b"], wake_at=20),  # in the past: ignored
        }
    )
    finished = by_id(simulate(trace, script, gpus=2, gpus_per_node=2, estimate_factor=0))
    assert script.passes == [0, 10, 50]
    assert finished["a"].first_start == finished["b"].first_start == 50
    assert finished["b"].waited == 40


def test_a_policy_cannot_start_more_than_is_free() -> None:
    trace = [TraceJob("a", 0, 100, 2, "p"), TraceJob("b", 0, 100, 1, "p")]
    with pytest.raises(ValueError, match="more GPUs than are free"):
        simulate(
            trace,
            Script({0: Decision(start=["a", "b"])}),
            gpus=2,
            gpus_per_node=2,
            estimate_factor=0,
        )


def test_declared_runtimes_follow_the_estimate_factor() -> None:
    trace = [TraceJob("a", 0, 100, 1, "p")]
    (with_estimate,) = simulate(
        trace, Script({0: Decision(start=["a"])}), gpus=1, gpus_per_node=1, estimate_factor=2
    )
    (without,) = simulate(
        trace, Script({0: Decision(start=["a"])}), gpus=1, gpus_per_node=1, estimate_factor=0
    )
    assert with_estimate.declared_runtime == 200
    assert without.declared_runtime is None


def test_the_summary_counts_every_queued_stretch_and_only_useful_work() -> None:
    trace = [TraceJob("a", 0, 10_000, 2, "p"), TraceJob("g", 0, 100, 8, "q")]
    script = Script(
        {
            0: Decision(start=["a"], wake_at=5000),
            5000: Decision(preempt=["a"], start=["g"]),
            5100: Decision(start=["a"]),
        }
    )
    finished = simulate(trace, script, gpus=8, gpus_per_node=8, estimate_factor=0)
    summary = summarize(finished, gpus=8)
    a = by_id(finished)["a"]
    assert a.finished == 5100 + 60 + 6400
    assert summary.mean_wait_hours == pytest.approx((100 + 5000) / 2 / 3600)
    assert summary.max_wait_hours == pytest.approx(5000 / 3600)
    assert summary.utilization == pytest.approx((10_000 * 2 + 100 * 8) / (8 * a.finished))
    assert summary.preemptions == 1 and summary.preempted_jobs == 1
    assert summary.lost_gpu_hours == pytest.approx((1400 + 60) * 2 / 3600)
    assert summary.large_gang_wait_hours == pytest.approx(5000 / 3600)
    assert summary.project_wait_hours == {"p": pytest.approx(100 / 3600), "q": 5000 / 3600}
    assert set(summary.as_json()) == {
        *("mean_jct_hours", "p99_jct_hours", "utilization", "max_wait_hours"),
        *("mean_wait_hours", "fairness", "preemptions", "lost_gpu_hours"),
    }
