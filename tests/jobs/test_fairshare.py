"""Fair-share ordering of the queue across projects."""

from __future__ import annotations

from collections import Counter

from trainplane.jobs.fairshare import fair_order
from trainplane.jobs.placement import ClusterState, Demand, plan


def flood(project: str, count: int, gpus: int = 1) -> list[Demand]:
    return [Demand(f"{project}{i}", gpus, project_id=project) for i in range(count)]


def test_one_project_keeps_the_queue_order():
    queue = flood("a", 5)
    assert fair_order(queue, {}, {}) == queue


def test_equal_weights_interleave_projects_and_keep_each_ones_order():
    queue = flood("a", 4) + flood("b", 4)  # a submitted everything first
    ordered = [d.job_id for d in fair_order(queue, {}, {})]
    assert ordered == ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "b3"]


def test_the_project_below_its_share_goes_first():
    queue = flood("a", 3) + flood("b", 3)
    ordered = [d.job_id for d in fair_order(queue, {"a": 2}, {})]
    assert ordered[:3] == ["b0", "b1", "a0"]


def test_weights_split_a_cluster_in_their_ratio():
    queue = flood("a", 40) + flood("b", 40)
    cluster = ClusterState("c", "c", "cpu", gpus=4, gpus_per_node=4)
    placed = plan(fair_order(queue, {}, {"a": 3.0, "b": 1.0}), [cluster]).placements
    counts = Counter(job_id[0] for job_id, _ in placed)
    assert counts == {"a": 3, "b": 1}


def test_a_big_job_heads_its_project_and_gets_the_reservation():
    big = Demand("big", 4, project_id="a", max_runtime_seconds=60)
    queue = [big, *flood("b", 6)]
    cluster = ClusterState("c", "c", "cpu", gpus=4, gpus_per_node=4, in_use=2)
    decided = plan(fair_order(queue, {"b": 2}, {}), [cluster])
    # a holds nothing, so its big job is offered first: it cannot start, and
    # reserves the cluster rather than letting b's small jobs take the free GPUs.
    assert decided.reserved_job == "big"
    assert decided.placements == []
