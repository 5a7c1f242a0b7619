"""The trainplane policy in the replay engine, on tiny traces: attained
service lets a short job past a long one (after the long one's minimum run),
a gang passed over for longer than the starvation bound starts, and a long
job passed over by a stream of short ones waits no longer than the wait bound."""

from __future__ import annotations

from trainplane.jobs.service_queues import HOUR, ServiceRules
from trainplane.simulation.engine import simulate
from trainplane.simulation.trace import TraceJob
from trainplane.simulation.trainplane_policy import TrainplanePolicy


def _run(jobs, rules=None, gpus=8):
    finished = simulate(
        jobs, TrainplanePolicy(rules), gpus=gpus, gpus_per_node=8, estimate_factor=0
    )
    return {sim.id: sim for sim in finished}


def test_a_short_job_preempts_a_long_one_past_the_first_level_after_its_minimum_run():
    jobs = [
        TraceJob("long", 0.0, 10 * HOUR, 8, "a"),
        TraceJob("short", 60.0, 600.0, 8, "b"),
    ]
    sims = _run(jobs)
    rules = ServiceRules()
    # long had 8 GPU-hours by 1 h in: level 1; short (level 0) stops it then.
    assert sims["long"].preemptions == 1
    assert sims["short"].first_start >= rules.min_run_seconds
    assert sims["short"].finished < 2 * HOUR
    assert sims["long"].lost_gpu_seconds > 0


def test_a_passed_over_gang_starts_once_past_the_starvation_bound():
    rules = ServiceRules(starve_after_seconds=4 * HOUR, preempt=False)
    # A stream of 1-GPU jobs keeps some GPU busy; the 8-GPU gang needs them all.
    stream = [TraceJob(f"s{i}", 60.0 + i * 900.0, 1800.0, 1, "a") for i in range(40)]
    sims = _run([TraceJob("gang", 0.0, HOUR, 8, "b"), TraceJob("hold", 0.0, 2 * HOUR, 1, "a"),
                 *stream], rules)  # fmt: skip
    assert sims["gang"].waited <= rules.starve_after_seconds + 1800.0


def test_a_long_job_passed_over_by_short_ones_waits_no_longer_than_the_wait_bound():
    # One GPU; a 10-hour job, then a short job every half hour for 20 hours.
    # Least attained service alone lets every short job past the long one.
    stream = [TraceJob(f"s{i}", 60.0 + i * 1800.0, 1700.0, 1, "b") for i in range(40)]
    jobs = [TraceJob("long", 0.0, 10 * HOUR, 1, "a"), *stream]
    unbounded = _run(jobs, ServiceRules(fifo_wait_factor=0), gpus=1)
    assert unbounded["long"].waited > 15 * HOUR
    # First come, first served would make a short job wait for what is left
    # of the long one: the bound is that, and the long job finishes first.
    bounded = _run(jobs, gpus=1)
    assert bounded["long"].waited < 4 * HOUR
    assert bounded["long"].finished < unbounded["long"].finished - 10 * HOUR
    assert max(sim.waited for sim in bounded.values()) < unbounded["long"].waited


def test_a_job_whose_peers_ran_long_enters_the_top_level_and_waits_with_the_long_runs():
    # 16 GPUs, no preemption. c's long run holds 8 (the top level's share
    # once past 100 GPU-hours); a's four 8-GPU runs of 13 h (104 GPU-hours
    # each) run one after another on the other 8. Queued behind a's last:
    # a's next 8-GPU job, then b's short one.
    jobs = [
        TraceJob("hold", 0.0, 1000 * HOUR, 8, "c"),
        *(TraceJob(f"a{i}", 1.0 + i, 13 * HOUR, 8, "a") for i in range(4)),
        TraceJob("a-last", 5.0, 13 * HOUR, 8, "a"),
        TraceJob("next", 60 * HOUR, 10 * HOUR, 8, "a"),
        TraceJob("short", 61 * HOUR, 0.5 * HOUR, 8, "b"),
    ]
    rules = ServiceRules(preempt=False, entry_min_peers=4)
    # When next is first seen, four of a's 8-GPU jobs have finished, all long:
    # it enters the top level, which holds its share, so the short job goes first.
    entered = _run(jobs, rules, gpus=16)
    assert entered["short"].first_start < entered["next"].first_start
    # Climbing from the lowest level, next is the short job's peer, and older.
    climbing = _run(jobs, ServiceRules(preempt=False, entry_top_fraction=0), gpus=16)
    assert climbing["next"].first_start < climbing["short"].first_start
