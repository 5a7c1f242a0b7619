"""torchrun's device rule (runtime.devices), as both kinds of gang apply it:
pure functions, no cluster."""

from __future__ import annotations

import pytest

from trainplane.runtime.devices import (
    RankPlacement,
    gpu_order,
    node_device_lists,
    visible_devices_env,
)

pytestmark = pytest.mark.ray_free


def test_every_rank_of_a_node_sees_its_nodes_gpus_in_local_rank_order():
    # Ray gave the ranks of node a GPUs 3, 0 and 1: each sees all three, its
    # own at LOCAL_RANK; node b's ranks see node b's GPUs only.
    placements = [
        RankPlacement("a", 0, ("3",)),
        RankPlacement("b", 0, ("0",)),
        RankPlacement("a", 2, ("1",)),
        RankPlacement("a", 1, ("0",)),
        RankPlacement("b", 1, ("1",)),
    ]
    lists = node_device_lists(placements)
    assert lists == ["3,0,1", "0,1", "3,0,1", "3,0,1", "0,1"]
    for placement, devices in zip(placements, lists, strict=True):
        assert devices is not None
        assert devices.split(",")[placement.local_rank] == placement.gpu_ids[0]


def test_ranks_without_gpus_get_no_device_list():
    placements = [RankPlacement("a", 0, ()), RankPlacement("a", 1, ())]
    assert node_device_lists(placements) == [None, None]
    assert visible_devices_env(None) == {}
    assert visible_devices_env("0,1") == {"CUDA_VISIBLE_DEVICES": "0,1"}


def test_local_ranks_that_would_share_a_gpu_are_refused():
    with pytest.raises(ValueError, match="local ranks"):
        node_device_lists([RankPlacement("a", 0, ("0",)), RankPlacement("a", 0, ("1",))])


def test_workers_order_by_gpu_number_not_by_its_text():
    assert sorted([("10",), ("9",), ("2",)], key=gpu_order) == [("2",), ("9",), ("10",)]
    assert sorted([("GPU-b",), ("GPU-a",)], key=gpu_order) == [("GPU-a",), ("GPU-b",)]
