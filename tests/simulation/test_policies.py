"""The classic policies a replay compares against, on tiny traces where the
right schedule is worked out by hand: FIFO's head-of-line blocking, EASY
backfill with and without declared runtimes, and Tiresias-style LAS
preempting for a job with less service and promoting a starved one."""

from __future__ import annotations

import math

from trainplane.simulation.engine import Decision, View, simulate
from trainplane.simulation.policies import POLICIES, Easy, Fifo, Las
from trainplane.simulation.trace import TraceJob

# 6 of 8 GPUs busy until 100; a 7-GPU gang waits for them; behind it two long
# single-GPU jobs and a short one.
GANG_BEHIND = [
    TraceJob("a", 0, 100, 6, "p"),
    TraceJob("b", 1, 100, 7, "p"),
    TraceJob("c", 2, 1000, 1, "p"),
    TraceJob("d", 3, 1000, 1, "p"),
    TraceJob("e", 4, 50, 1, "p"),
]


def starts(policy, trace, *, gpus: int, factor: float) -> dict[str, float | None]:
    finished = simulate(trace, policy, gpus=gpus, gpus_per_node=8, estimate_factor=factor)
    return {sim.id: sim.first_start for sim in finished}


def test_the_registry_names_every_policy() -> None:
    assert set(POLICIES) == {"trainplane", "fifo", "easy", "las"}
    assert {name: POLICIES[name]().name for name in ("fifo", "easy", "las")} == {
        "fifo": "fifo",
        "easy": "easy",
        "las": "las",
    }


def test_fifo_holds_everyone_behind_the_gang() -> None:
    # A GPU is free from the start, yet c, d and e wait for b.
    assert starts(Fifo(), GANG_BEHIND, gpus=8, factor=2) == {
        "a": 0,
        "b": 100,
        "c": 100,
        "d": 200,
        "e": 200,
    }


def test_easy_backfills_into_spare_gpus_and_before_the_reservation() -> None:
    # b's reservation: at 200 (a's declared 2 x 100), when 8 GPUs are free and
    # it needs 7. c takes the one it will not need; d finds none left; e
    # declares 100 s and is done by 104, before the reservation.
    assert starts(Easy(), GANG_BEHIND, gpus=8, factor=2) == {
        "a": 0,
        "b": 100,
        "c": 2,
        "d": 200,
        "e": 4,
    }


def test_easy_without_estimates_backfills_nothing() -> None:
    assert starts(Easy(), GANG_BEHIND, gpus=8, factor=0) == starts(
        Fifo(), GANG_BEHIND, gpus=8, factor=0
    )


class Recording:
    """Wraps a policy; keeps every pass's time and decision."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.name = policy.name
        self.decisions: list[tuple[float, Decision]] = []

    def decide(self, view: View) -> Decision:
        decision = self.policy.decide(view)
        self.decisions.append((view.now, decision))
        return decision


def test_las_preempts_a_job_that_has_had_more_service() -> None:
    trace = [TraceJob("long", 0, 3 * 3600, 1, "p"), TraceJob("short", 100, 1800, 1, "p")]
    finished = {
        sim.id: sim for sim in simulate(trace, Las(), gpus=1, gpus_per_node=1, estimate_factor=0)
    }
    long, short = finished["long"], finished["short"]
    # At 1 GPU-hour long drops to the second queue and short (still in the
    # first) takes its GPU; long's hour is checkpointed, so it loses only the
    # restart overhead when it comes back at 5400.
    assert short.first_start == 3600
    assert long.preemptions == 1
    assert long.lost_gpu_seconds == 60
    assert long.finished == 5400 + 60 + 2 * 3600
    assert long.waited == 1800


def test_las_promotes_a_job_that_waited_twice_as_long_as_it_ran() -> None:
    # long runs an hour, then ten 50-minute jobs (each under the 1 GPU-hour
    # threshold) keep the only GPU. Waiting since 3600, long is due for
    # promotion at 3600 + 2 x 3600 = 10800; b2 (started at 9600) is leased
    # until its first checkpoint at 11400, when long takes the GPU back.
    trace = [TraceJob("long", 0, 10 * 3600, 1, "p")]
    trace += [TraceJob(f"b{i}", 1000, 3000, 1, "q") for i in range(10)]
    promoting = Recording(Las(thresholds_gpu_hours=(1.0,)))
    simulate(trace, promoting, gpus=1, gpus_per_node=1, estimate_factor=0)
    at = {now: (d.preempt, d.start) for now, d in promoting.decisions if d.preempt or d.start}
    assert at[3600] == (["long"], ["b0"])
    assert at[11400] == (["b2"], ["long"])

    patient = Recording(Las(thresholds_gpu_hours=(1.0,), starve=math.inf))
    simulate(trace, patient, gpus=1, gpus_per_node=1, estimate_factor=0)
    # Never promoted: long waits for all ten (3600 + 10 x 3000).
    restarts = [now for now, d in patient.decisions if "long" in d.start]
    assert restarts == [0, 3600 + 10 * 3000]
