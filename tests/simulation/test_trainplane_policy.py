"""The trainplane policy in the replay engine, on tiny traces: attained
service lets a short job past a long one (after the long one's minimum run),
a newcomer made to wait takes GPUs that free up or preempts once it has waited,
a gang passed over for longer than the starvation bound starts, and a long
job passed over by a stream of short ones waits no longer than the wait bound."""

from __future__ import annotations

import pytest

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


@pytest.mark.parametrize("frees_up", [False, True])
def test_a_newcomer_made_to_wait_takes_freed_gpus_or_preempts_once_it_has_waited(frees_up):
    rules = ServiceRules(preempt_after_wait_seconds=HOUR)
    jobs = [
        TraceJob("long", 0.0, 10 * HOUR, 8, "a"),
        TraceJob("short", 2 * HOUR, 600.0, 8, "b"),
    ]
    if frees_up:  # the long job ends half an hour after the newcomer came
        jobs[0] = TraceJob("long", 0.0, 2.5 * HOUR, 8, "a")
    sims = _run(jobs, rules)
    short = sims["short"]
    if frees_up:
        assert sims["long"].preemptions == 0
        assert short.first_start == pytest.approx(2.5 * HOUR, abs=120.0)
    else:
        # It stops the long job once it has waited an hour (no sooner: the
        # pass that ends its wait is the first that may choose a victim).
        assert sims["long"].preemptions == 1
        assert 3 * HOUR <= short.first_start <= 3 * HOUR + 1800.0


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


def test_the_replay_learns_from_every_finished_job_even_one_no_pass_saw_running():
    # One 8-GPU job after another, no preemption: nothing happens while each
    # runs, so no pass sees any of them running.
    jobs = [TraceJob(f"a{i}", float(i), 13 * HOUR, 8, "a") for i in range(4)]
    jobs.append(TraceJob("last", 4.0, 10 * HOUR, 8, "a"))
    rules = ServiceRules(preempt=False, entry_min_peers=4)
    policy = TrainplanePolicy(rules)
    simulate(jobs, policy, gpus=8, gpus_per_node=8, estimate_factor=0)
    # Sizes (for the wait bound): 104 GPU-hours, four times (the last job
    # ends after the replay's last pass).
    assert policy._sizes.sizes().by_project["a"] == pytest.approx(104 * HOUR)
    # Entry levels: the four reached the top level.
    assert policy._peers.entry_level("a", 8) == rules.top_level
    assert policy._peers.entry_level("a", 4) == 0
