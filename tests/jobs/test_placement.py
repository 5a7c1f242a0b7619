"""Gang admission and EASY backfill, as pure functions."""

from __future__ import annotations

import math

from trainplane.jobs.placement import (
    ClusterState,
    Demand,
    Release,
    can_ever_hold,
    never_fits_reason,
    plan,
    wait_reason,
)


def cluster(name="a", gpus=8, per_node=8, in_use=0, accelerator="H100", ready=True, releases=()):
    return ClusterState(
        id=name,
        name=name,
        accelerator=accelerator,
        gpus=gpus,
        gpus_per_node=per_node,
        in_use=in_use,
        ready=ready,
        releases=list(releases),
    )


def job(job_id, gpus, **kwargs):
    return Demand(job_id, gpus, **kwargs)


def test_gang_admission_all_or_nothing():
    decided = plan([job("big", 6), job("small", 2)], [cluster(gpus=4)])
    # "big" can never fit a 4-GPU cluster, so it does not block "small".
    assert decided.placements == [("small", "a")]


def test_jobs_start_in_queue_order_until_capacity_runs_out():
    decided = plan([job("j1", 2), job("j2", 2), job("j3", 2)], [cluster(gpus=4)])
    assert decided.placements == [("j1", "a"), ("j2", "a")]
    assert decided.reserved_job == "j3"


def test_best_fit_keeps_big_holes_open():
    clusters = [cluster("big", gpus=8), cluster("small", gpus=2)]
    decided = plan([job("tiny", 2), job("wide", 8)], clusters)
    assert decided.placements == [("tiny", "small"), ("wide", "big")]


def test_gpu_type_and_per_node_shape_are_respected():
    clusters = [
        cluster("h100", gpus=16, per_node=8),
        cluster("a10", accelerator="A10", gpus=16, per_node=4),
    ]
    decided = plan(
        [job("needs-a10", 4, gpu_type="a10"), job("needs-8-per-node", 16, gpus_per_node=8)],
        clusters,
    )
    assert decided.placements == [("needs-a10", "a10"), ("needs-8-per-node", "h100")]
    assert not can_ever_hold(clusters[1], job("x", 8, gpus_per_node=8))
    assert not can_ever_hold(cluster(gpus=8, per_node=8), job("x", 4, gpus_per_node=1))


def test_unready_clusters_take_nothing():
    decided = plan([job("j", 1)], [cluster("down", ready=False), cluster("up", gpus=1, in_use=1)])
    assert decided.placements == []


def test_backfill_that_cannot_delay_the_head_is_allowed():
    # 8 GPUs, 6 in use by a job that ends within 100 s; the head needs 8.
    busy = cluster(gpus=8, in_use=6, releases=[Release(6, after_seconds=100)])
    queue = [
        job("head", 8),
        job("short", 2, max_runtime_seconds=50),
        job("long", 2, max_runtime_seconds=500),
        job("unbounded", 2),
    ]
    decided = plan(queue, [busy])
    assert decided.placements == [("short", "a")]
    assert decided.reserved_job == "head"


def test_backfill_may_use_gpus_the_head_will_not_need():
    # At t=100 s 8 GPUs are free, the head needs 6: 2 spare GPUs may backfill.
    busy = cluster(gpus=8, in_use=6, releases=[Release(6, after_seconds=100)])
    decided = plan([job("head", 6), job("long", 2, max_runtime_seconds=10_000)], [busy])
    assert decided.placements == [("long", "a")]


def test_no_backfill_when_nobody_knows_when_gpus_come_back():
    busy = cluster(gpus=8, in_use=6, releases=[Release(6, after_seconds=None)])
    decided = plan([job("head", 8), job("short", 2, max_runtime_seconds=1)], [busy])
    assert decided.placements == []


def test_backfill_elsewhere_is_always_allowed():
    clusters = [
        cluster("h100", gpus=8, in_use=8, releases=[Release(8, None)]),
        cluster("a10", accelerator="A10", gpus=2),
    ]
    decided = plan([job("head", 8, gpu_type="H100"), job("other", 2)], clusters)
    assert decided.placements == [("other", "a10")]


def test_reservation_window_math_is_finite_only_with_known_ends():
    from trainplane.jobs.placement import _reserve

    free = {"a": 0}
    known = _reserve(job("h", 4), [cluster(gpus=4, in_use=4, releases=[Release(4, 30)])], free)
    assert known.windows["a"] == (30, 0)
    unknown = _reserve(job("h", 4), [cluster(gpus=4, in_use=4, releases=[Release(4, None)])], free)
    assert unknown.windows["a"][0] == math.inf


def test_never_fits_reason():
    clusters = [cluster("local", accelerator="cpu", gpus=2, per_node=2)]
    assert never_fits_reason(job("x", 2), clusters) is None
    reason = never_fits_reason(job("x", 3), clusters)
    assert reason and "3 GPUs" in reason and "local has 2" in reason
    assert never_fits_reason(job("x", 3), []) is None  # nothing registered yet: wait


def test_wait_reasons():
    local = cluster("local", accelerator="cpu", gpus=2, per_node=2, in_use=2)
    assert wait_reason(job("x", 2), [local], 0) == "waiting for 2 GPUs: cluster local has 0 free"
    free = cluster("local", accelerator="cpu", gpus=2, per_node=2)
    assert wait_reason(job("x", 2), [free], 3) == "waiting for 2 GPUs: 3 jobs ahead in the queue"
    assert "more than 1000" in wait_reason(job("x", 2), [free], 1000, at_least=True)
    down = cluster("local", accelerator="cpu", gpus=2, per_node=2, ready=False)
    assert wait_reason(job("x", 1), [down], 0) == "waiting for 1 GPU: local is unreachable"
    assert wait_reason(job("x", 1), [], 0) == "waiting for a cluster: none is registered"


def test_a_job_goes_only_where_its_memory_estimate_fits_the_gpus():
    small = ClusterState("small", "small", "H100", 8, 8, gpu_memory_gb=40)
    big = ClusterState("big", "big", "H100", 8, 8, in_use=4, gpu_memory_gb=80)
    unsized = ClusterState("unsized", "unsized", "H100", 8, 8)
    needs_60 = job("j", 4, gpu_memory_gb=60)
    assert not can_ever_hold(small, needs_60)
    assert can_ever_hold(big, needs_60) and can_ever_hold(unsized, needs_60)
    # Best fit would pick the busier big cluster anyway; without big, the
    # small one is passed over even though it is empty.
    assert plan([needs_60], [small, big]).placements == [("j", "big")]
    assert plan([needs_60], [small]).placements == []
    reason = never_fits_reason(needs_60, [small])
    assert reason == (
        "no cluster can ever hold 4 GPUs of 60+ GB: small has 8 H100 of 40 GB (8 per node)"
    )
    # A cpu cluster has no GPU memory to compare with.
    cpu = ClusterState("cpu", "cpu", "cpu", 8, 8, gpu_memory_gb=1)
    assert can_ever_hold(cpu, needs_60)
