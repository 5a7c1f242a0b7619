"""The memory estimate against measured memory: the MLP example at 34M
parameters on 2 CPU workers (gloo, fp32) under DDP, FSDP2, ZeRO-2 and
ZeRO-3, each rank measuring what training added to its resident memory
(``trainplane.testing.memory_probe``). Every estimate is within 25% of the
measure, and the strategies come out in the same order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TORCH_EXTENSIONS_CACHE
from tests.factories import example_module
from trainplane.jobs.memory import ModelShape, StrategyChoice, Workload, estimate
from trainplane.testing.memory_probe import MEASURING_ENV, probe_spec

ARGS = {
    "features": 256,
    "hidden": 2048,
    "layers": 8,
    "classes": 8,
    "steps": 3,
    "global_batch": 64,
    "samples": 256,
}
WORKERS = 2
STRATEGIES = {
    "ddp": ({"type": "ddp"}, StrategyChoice("ddp")),
    "fsdp": ({"type": "fsdp"}, StrategyChoice("fsdp")),
    "zero2": ({"type": "deepspeed", "deepspeed": {"stage": 2}}, StrategyChoice("deepspeed", 2)),
    "zero3": ({"type": "deepspeed", "deepspeed": {"stage": 3}}, StrategyChoice("deepspeed", 3)),
}


def _parameters() -> int:
    mlp = example_module("mlp")
    model = mlp.MLP(ARGS["features"], ARGS["hidden"], ARGS["classes"], ARGS["layers"])
    return sum(p.numel() for p in model.parameters())


def _measure(strategy: dict, out: Path) -> list[int]:
    spec = probe_spec("mlp", ARGS, out, strategy=strategy, gpus=WORKERS)
    path = out.with_suffix(".json")
    path.write_text(json.dumps(spec))
    env = {
        **os.environ,
        "TRAINPLANE_DEVICE": "cpu",
        "OMP_NUM_THREADS": "1",
        "TORCH_EXTENSIONS_DIR": str(TORCH_EXTENSIONS_CACHE),
        **MEASURING_ENV,
    }
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += [f"--nproc-per-node={WORKERS}", "-m", "trainplane.runtime.local", str(path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads((out / f"rank-{r}.json").read_text())["peak_bytes"] for r in range(WORKERS)]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, float]:
    root = tmp_path_factory.mktemp("memory")
    return {name: max(_measure(spec, root / name)) for name, (spec, _) in STRATEGIES.items()}


def test_estimates_agree_with_measured_memory_within_a_quarter(measured):
    shape = ModelShape(_parameters(), layers=ARGS["layers"], hidden_size=ARGS["hidden"])
    workload = Workload("fp32", micro_batch_size=ARGS["global_batch"] // WORKERS)
    estimates = {
        name: estimate(shape, workload, choice, WORKERS, on_gpu=False).total
        for name, (_, choice) in STRATEGIES.items()
    }
    table = {n: (round(measured[n] / 1e6), round(estimates[n] / 1e6)) for n in STRATEGIES}
    print("MB measured, estimated:", table)
    for name in STRATEGIES:
        assert estimates[name] == pytest.approx(measured[name], rel=0.25), (name, table)
    assert sorted(STRATEGIES, key=measured.get) == sorted(STRATEGIES, key=estimates.get), table
    # Sharding shows: FSDP2 needs well under half of what DDP does.
    assert measured["fsdp"] < 0.6 * measured["ddp"]
