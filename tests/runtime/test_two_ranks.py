"""Two real ranks under torchrun (gloo), running tests/runtime/two_ranks.py:
FSDP2 materializes a model shard by shard (a rank building it on the meta
device never holds all of it, and training matches DDP over full copies),
the fine-tune recipe under FSDP2 loads the base on rank 0 alone and trains
as DDP over full copies, reports meet the other rank only now and then (the
mean over the ranks of every step kept), and the runtime's bookkeeping
collectives wait on their own group, past the training group's timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainplane.testing.memory_probe import MEASURING_ENV

RANKS = Path(__file__).with_name("two_ranks.py")


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("two-ranks")
    env = {**os.environ, "OMP_NUM_THREADS": "1", **MEASURING_ENV}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node=2", str(RANKS), str(out)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads((out / f"rank-{rank}.json").read_text()) for rank in (0, 1)]


def test_a_rank_building_on_the_meta_device_never_holds_the_whole_model(two_ranks):
    rank1 = two_ranks[1]
    # Its half of the shards and one layer in flight: about 0.58 of the model.
    assert rank1["meta_prepare_peak"] < 0.7 * rank1["model_bytes"], rank1["meta_prepare_peak"]
    assert rank1["meta_prepare_peak"] > 0.4 * rank1["model_bytes"]  # its shards were measured


def test_sharded_init_trains_as_ddp_over_full_copies(two_ranks):
    rank0 = two_ranks[0]
    assert rank0["meta"].keys() == rank0["ddp"].keys()
    for name, (total, largest) in rank0["ddp"].items():
        assert rank0["meta"][name] == pytest.approx([total, largest], rel=1e-5, abs=1e-5), name
        # Rank 1 built its copy with another seed: the shards still came from rank 0.
        assert rank0["copies"][name] == rank0["meta"][name], name


def test_the_finetune_recipe_under_fsdp_loads_the_base_on_rank_0_alone(two_ranks):
    rank0, rank1 = (ranks["finetune"] for ranks in two_ranks)
    size = rank0["model_bytes"]  # the LoRA model as rank 0 built it, in bf16
    assert not rank0["built_on_meta"] and rank1["built_on_meta"]
    assert rank1["dtypes"] == rank0["dtypes"]  # the same rule on every rank
    assert rank1["build_peak"] < 0.1 * size, (rank1["build_peak"], size)
    # Loading it whole, as every rank did before, is seen.
    assert rank1["full_copy_peak"] > 0.8 * size, (rank1["full_copy_peak"], size)


def test_the_finetune_recipe_under_fsdp_trains_as_ddp_over_full_copies(two_ranks):
    finetune = two_ranks[0]["finetune"]
    # Rank 1's adapters were on the meta device: they took rank 0's values.
    assert finetune["adapters_moved"]
    worst = max(finetune["fsdp_vs_ddp"].items(), key=lambda item: item[1])
    assert worst[1] < 1e-5, worst


def test_bookkeeping_waits_for_rank_0_past_the_training_groups_timeout(two_ranks):
    expected = [None, "from 0", ["from 0", "from 1"]]
    assert two_ranks[0]["bookkeeping"] == two_ranks[1]["bookkeeping"] == expected


def test_reports_meet_rarely_and_keep_each_steps_mean_over_the_ranks(two_ranks):
    rank0, rank1 = (ranks["step_sync"] for ranks in two_ranks)
    # Both ranks met at the same steps (the first two, to learn the pace, and
    # the decision step), and learned rank 0's stop and clock there.
    assert [m[0] for m in rank0] == [m[0] for m in rank1] == [1, 2, 7, "end"]
    assert [m[2:] for m in rank1] == [[None, True], [None, True], ["pruned", True], [None, False]]
    # Every step's tensor is the mean over the ranks; plain numbers stay the rank's own.
    gathered = {step: values for m in rank1 for step, values in m[1]}
    assert sorted(gathered) == list(range(1, 11))
    for step, values in gathered.items():
        assert values == {"own": 1.0, "loss": step + 0.5}, step
    assert [step for step, _ in rank0[2][1]] == [3, 4, 5, 6, 7]  # pending until the decision
