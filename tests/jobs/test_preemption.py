"""Choosing victims for waiting high-priority jobs (pure code, no database)."""

from __future__ import annotations

from trainplane.jobs.placement import ClusterState, Demand
from trainplane.jobs.preemption import RunningAttempt, choose_preemptions
from trainplane.jobs.quotas import ProjectQuota, QuotaLedger

LOW, NORMAL, HIGH = 0, 50, 100
MIN_RUNTIME = 600


def _cluster(name="a", *, gpus=4, in_use=4, ready=True):
    return ClusterState(
        id=name, name=name, accelerator="cpu", gpus=gpus, gpus_per_node=gpus, in_use=in_use,
        ready=ready,
    )  # fmt: skip


def _running(attempt, *, gpus=2, priority=LOW, seconds=3600, cluster="a", preempted_by=None):
    return RunningAttempt(
        attempt_id=attempt,
        job_id=f"job-{attempt}",
        cluster_id=cluster,
        gpus=gpus,
        priority=priority,
        running_seconds=seconds,
        preempted_by=preempted_by,
    )


def _choose(waiting, clusters, running, **kwargs):
    return choose_preemptions(waiting, clusters, running, min_runtime_seconds=MIN_RUNTIME, **kwargs)


def _victims(choices):
    return [(c.preemptor.job_id, c.cluster_id, [v.attempt_id for v in c.victims]) for c in choices]


def test_a_high_job_stops_just_enough_low_attempts_the_youngest_first():
    running = [
        _running("old", gpus=2, seconds=7200),
        _running("young", gpus=2, seconds=900),
    ]
    choices = _choose([Demand("h", 2)], [_cluster()], running)
    assert _victims(choices) == [("h", "a", ["young"])]


def test_free_gpus_count_first_so_fewer_attempts_stop():
    running = [_running("x", gpus=1, seconds=900), _running("y", gpus=2, seconds=1000)]
    choices = _choose([Demand("h", 2)], [_cluster(in_use=3)], running)
    assert _victims(choices) == [("h", "a", ["x"])]


def test_a_job_that_fits_now_preempts_nobody():
    assert _choose([Demand("h", 2)], [_cluster(in_use=2)], [_running("x")]) == []


def test_only_low_attempts_past_the_minimum_runtime_are_victims():
    running = [
        _running("normal", priority=NORMAL),
        _running("high", priority=HIGH),
        _running("fresh", seconds=MIN_RUNTIME - 1),
    ]
    assert _choose([Demand("h", 2)], [_cluster(in_use=6, gpus=6)], running) == []
    running.append(_running("ripe", seconds=MIN_RUNTIME))
    choices = _choose([Demand("h", 2)], [_cluster(in_use=8, gpus=8)], running)
    assert _victims(choices) == [("h", "a", ["ripe"])]


def test_nothing_stops_when_even_all_victims_would_not_free_enough():
    running = [_running("x", gpus=2), _running("y", gpus=2, priority=NORMAL)]
    assert _choose([Demand("h", 4)], [_cluster()], running) == []


def test_the_cluster_needing_the_fewest_freed_gpus_wins():
    clusters = [_cluster("a", gpus=4, in_use=4), _cluster("b", gpus=4, in_use=4)]
    running = [
        _running("a-big", gpus=4, cluster="a"),
        _running("b-1", gpus=2, cluster="b", seconds=5000),
        _running("b-2", gpus=2, cluster="b", seconds=4000),
    ]
    choices = _choose([Demand("h", 2)], clusters, running)
    assert _victims(choices) == [("h", "b", ["b-2"])]


def test_attempts_already_stopping_for_a_job_count_toward_it():
    running = [
        _running("stopping", gpus=2, preempted_by="h"),
        _running("other", gpus=2, seconds=900),
    ]
    assert _choose([Demand("h", 2)], [_cluster()], running) == []
    # A second high job cannot count on GPUs being freed for the first.
    choices = _choose([Demand("h", 2), Demand("h2", 2)], [_cluster()], running)
    assert _victims(choices) == [("h2", "a", ["other"])]


def test_two_waiting_jobs_do_not_claim_the_same_victim():
    running = [_running("x", gpus=2, seconds=900), _running("y", gpus=2, seconds=1000)]
    choices = _choose([Demand("h1", 2), Demand("h2", 2), Demand("h3", 2)], [_cluster()], running)
    assert _victims(choices) == [("h1", "a", ["x"]), ("h2", "a", ["y"])]


def test_clusters_that_cannot_hold_the_job_or_are_down_are_not_considered():
    clusters = [_cluster("small", gpus=2, in_use=2), _cluster("down", in_use=4, ready=False)]
    running = [_running("s", cluster="small"), _running("d", gpus=4, cluster="down")]
    assert _choose([Demand("h", 4)], clusters, running) == []


def test_a_job_its_quota_holds_back_preempts_nobody():
    quota = ProjectQuota(project_id="p", name="vision", max_gpus=2, gpus_in_use=2,
                         gpu_hours_per_month=None)  # fmt: skip
    ledger = QuotaLedger.of([quota])
    waiting = [Demand("h", 2, project_id="p")]
    assert _choose(waiting, [_cluster()], [_running("x")], quotas=ledger) == []
