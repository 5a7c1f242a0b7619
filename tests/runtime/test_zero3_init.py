"""ZeRO-3 builds the model partitioned (``TrainContext.model_init``): two
ranks under torchrun, each holding only its share from the first parameter
on, train it in bf16 on fp32 inputs and export the fp32 master weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from tests.conftest import TORCH_EXTENSIONS_CACHE
from tests.runtime.test_export import _load

LAYERS, WIDTH = 16, 1024  # 17M parameters: 67 MB in fp32
FULL_FP32_BYTES = LAYERS * (WIDTH * WIDTH + WIDTH) * 4

PROBE = f"""
import json
import time

import deepspeed  # imported before anything is measured
import torch
from torch import nn

LAYERS, WIDTH = {LAYERS}, {WIDTH}


def memory(key):
    with open("/proc/self/status") as status:
        return next(int(l.split()[1]) * 1024 for l in status if l.startswith(key))


def peak_while(build):
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # the peak resident size starts again from now
    before = memory("VmRSS:")
    model = build()
    return model, memory("VmHWM:") - before


def stack():
    return nn.Sequential(*(nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)))


def train_loop(ctx):
    started = time.monotonic()
    # DeepSpeed sets up its communication (and its buffers) on first use:
    # once per process, whatever the model's size; not measured.
    with ctx.model_init():
        nn.Linear(8, 8)
    # The same measurement without partitioning: what each rank held before.
    whole, whole_peak = peak_while(stack)
    del whole
    torch.manual_seed(0)

    def partitioned():
        with ctx.model_init():
            return stack()

    model, peak = peak_while(partitioned)
    found = {{
        "whole_peak": whole_peak,
        "peak": peak,
        "held": sum(p.ds_tensor.numel() for p in model.parameters()),
        "numel": sum(p.ds_numel for p in model.parameters()),
        "dtypes": sorted({{str(p.dtype) for p in model.parameters()}}),
    }}
    inputs = torch.randn(64, WIDTH)
    loader = ctx.data_loader(torch.utils.data.TensorDataset(inputs), batch_size=4)
    engine, _ = ctx.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    losses = []
    for (batch,) in loader.forever():
        loss = engine(batch).float().pow(2).mean()  # fp32 inputs, bf16 weights
        ctx.backward(loss)
        ctx.step()
        losses.append(loss.item())
        if ctx.global_step >= 3:
            break
    found["losses"] = losses
    found["seconds"] = time.monotonic() - started
    with open(f"rank-{{ctx.rank}}.json", "w") as out:
        json.dump(found, out)
"""


def test_two_ranks_build_only_their_share_train_in_bf16_and_export_fp32(tmp_path: Path):
    (tmp_path / "probe.py").write_text(PROBE)
    spec = {
        "kind": "train",
        "name": "zero3-init",
        "entrypoint": {"function": "probe:train_loop"},
        "resources": {"gpus": 2},
        "strategy": {"type": "deepspeed", "deepspeed": {"stage": 3}},
        "precision": "bf16",
        "register_model": {"name": "m"},
    }
    env = {
        **os.environ,
        "TRAINPLANE_SPEC": json.dumps(spec),
        "TRAINPLANE_MODEL_URI": str(tmp_path / "model"),
        "TRAINPLANE_DEVICE": "cpu",
        "TORCH_EXTENSIONS_DIR": str(TORCH_EXTENSIONS_CACHE),
        "OMP_NUM_THREADS": "1",
        # Large blocks mmapped and unmapped when freed: resident memory is
        # then what the process holds, not what glibc keeps for reuse.
        "MALLOC_MMAP_THRESHOLD_": "131072",
    }
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"),
            *("-m", "trainplane.runtime.local"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    parameters = FULL_FP32_BYTES // 4
    for found in ranks:
        assert found["numel"] == parameters
        assert found["held"] == parameters // 2  # this rank's half, nothing more
        assert found["dtypes"] == ["torch.bfloat16"]
        # Built whole, a rank's peak is the fp32 model; partitioned, a fraction.
        assert found["whole_peak"] > 0.9 * FULL_FP32_BYTES, found
        assert found["peak"] < 0.5 * FULL_FP32_BYTES, found
        assert len(found["losses"]) == 3 and all(map(torch.isfinite, torch.tensor(found["losses"])))
    _, exported = _load(str(tmp_path / "model"), tmp_path)
    weights = [p.detach() for p in exported.parameters()]
    assert sum(w.numel() for w in weights) == parameters
    assert {w.dtype for w in weights} == {torch.float32}
    # The fp32 master, not its bf16 rounding.
    assert any((w != w.to(torch.bfloat16).float()).any() for w in weights)
