"""Which process groups a rank makes and how long they wait (pure choices),
and how many threads a rank computes on. What these choices do across two
real ranks is in tests/runtime/test_two_ranks.py."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist

from trainplane.jobs.spec import FinetuneSpec, TrainSpec, parse_spec
from trainplane.runtime import process_groups
from trainplane.runtime.process_groups import (
    BOOKKEEPING_TIMEOUT,
    TRAINING_TIMEOUT,
    backend_for,
    bookkeeping_timeout,
    training_timeout,
)
from trainplane.runtime.threads import offloads_to_host, threads_for_rank, use_threads

pytestmark = pytest.mark.ray_free

NCCL_WATCHDOG = timedelta(minutes=10)  # NCCL's default collective timeout


def test_gpus_reduce_cuda_tensors_on_nccl_and_cpu_ones_on_gloo():
    # FSDP2's CPU offload clips gradients that live in host memory.
    assert backend_for("cuda") == "cuda:nccl,cpu:gloo"
    assert backend_for("cpu") == "gloo"


def test_the_training_group_waits_past_nccls_default_unless_the_job_says_how_long():
    assert training_timeout(None) == TRAINING_TIMEOUT > NCCL_WATCHDOG
    assert training_timeout(_spec()) == TRAINING_TIMEOUT
    assert training_timeout(_spec(stuck_after="2h")) == timedelta(hours=2)


def test_the_bookkeeping_group_waits_for_hours_or_the_jobs_max_runtime():
    assert bookkeeping_timeout(None) == BOOKKEEPING_TIMEOUT >= timedelta(hours=1)
    assert bookkeeping_timeout(_spec()) == BOOKKEEPING_TIMEOUT
    assert bookkeeping_timeout(_spec(max_runtime="1d")) == timedelta(days=1)


@pytest.mark.usefixtures("one_rank_group")
def test_the_bookkeeping_group_is_gloo_beside_the_training_group():
    process_groups.open_bookkeeping(None)
    try:
        group = process_groups.bookkeeping_group()
        assert group is not None and group is not dist.group.WORLD
        assert dist.get_backend(group) == "gloo"
    finally:
        process_groups._bookkeeping = None


OFFLOADING = {
    "fsdp cpu_offload": {"type": "fsdp", "fsdp": {"cpu_offload": True}},
    "zero optimizer offload": {"type": "deepspeed", "deepspeed": {"offload_optimizer": "cpu"}},
    "zero parameter offload": {
        "type": "deepspeed",
        "deepspeed": {"stage": 3, "offload_param": "cpu"},
    },
}


@pytest.mark.parametrize("strategy", OFFLOADING.values(), ids=OFFLOADING.keys())
def test_an_offloading_gpu_rank_takes_its_share_of_the_nodes_cpus(strategy):
    spec = _spec(strategy=strategy, resources={"cpus_per_worker": 1})
    assert offloads_to_host(spec)
    # Ray's OMP_NUM_THREADS would be 1: 64 CPUs over 8 ranks gives each 8.
    assert threads_for_rank(spec, on_gpu=True, local_world_size=8, cpus=64) == 8
    # Never fewer than it reserved.
    spec = _spec(strategy=strategy, resources={"cpus_per_worker": 12})
    assert threads_for_rank(spec, on_gpu=True, local_world_size=8, cpus=64) == 12


def test_threads_are_left_alone_without_offload_on_cpu_workers_or_when_the_job_set_them():
    offload = _spec(strategy=OFFLOADING["fsdp cpu_offload"])
    assert (
        threads_for_rank(_spec(strategy={"type": "fsdp"}), on_gpu=True, local_world_size=8, cpus=64)
        is None
    )
    assert threads_for_rank(offload, on_gpu=False, local_world_size=8, cpus=64) is None
    mine = _spec(
        strategy=OFFLOADING["fsdp cpu_offload"],
        entrypoint={"function": "x:y", "env": {"OMP_NUM_THREADS": "3"}},
    )
    assert threads_for_rank(mine, on_gpu=True, local_world_size=8, cpus=64) is None


def _spec(**fields: Any) -> TrainSpec | FinetuneSpec:
    return parse_spec({"kind": "train", "name": "t", "entrypoint": {"function": "x:y"}, **fields})


def test_use_threads_sets_torch_and_openmp(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    try:
        use_threads(2)
        assert torch.get_num_threads() == 2
        assert os.environ["OMP_NUM_THREADS"] == "2"
    finally:
        torch.set_num_threads(before)
