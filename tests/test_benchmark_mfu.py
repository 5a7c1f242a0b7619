"""benchmarks/mfu.py: which peak a GPU's name gets, and what N is in 6N."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


mfu = _load(ROOT / "benchmarks" / "mfu.py", "benchmarks_mfu")
lm = _load(ROOT / "examples" / "lm" / "train.py", "benchmarks_mfu_lm_example")


@pytest.mark.parametrize(
    ("name", "part", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.4),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", "H100 NVL", 835.5),
        ("NVIDIA H200", "H200 SXM", 989.4),
        ("NVIDIA H200 NVL", "H200 NVL", 835.5),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM", 312.0),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM", 312.0),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe", 312.0),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe", 312.0),
        ("NVIDIA L40S", "L40S", 362.05),
        ("NVIDIA L40", "L40", 181.05),
        ("NVIDIA L4", "L4", 121.0),
        ("NVIDIA A10", "A10", 125.0),
    ],
)
def test_each_known_part_gets_its_own_dense_bf16_peak(name: str, part: str, tflops: float) -> None:
    assert mfu.peak_for(name) == mfu.Peak(part, tflops)


@pytest.mark.parametrize(
    "name",
    # A bare "H100" could be any of three parts; the others are not in the table.
    ["NVIDIA H100", "NVIDIA H100 PCIe-like", "NVIDIA A10G", "Tesla V100-SXM2-32GB", "", "cpu"],
)
def test_a_name_not_known_exactly_gets_no_peak(name: str) -> None:
    assert mfu.peak_for(name) is None
    assert mfu.shown(mfu.mfu(1e6, 1e9, mfu.peak_for(name))) == "unknown"


def test_mfu_is_model_flops_over_the_parts_peak() -> None:
    peak = mfu.peak_for("NVIDIA H100 PCIe")
    assert mfu.mfu(1e5, 2e9, peak) == pytest.approx(1e5 * 2e9 / 756e12)
    assert mfu.shown(0.4215) == "42.1%"


def test_embedding_tables_are_not_in_n_but_the_output_projection_is() -> None:
    vocab, d, layers, heads, seq = 1000, 64, 3, 4, 32
    with torch.device("meta"):
        model = lm.TinyLM(vocab, d, layers, heads, seq)
    counted = mfu.matmul_parameters(model)
    blocks = layers * (12 * d * d + 13 * d)
    head, final_norm = vocab * d, 2 * d
    assert counted.total == counted.trained == blocks + head + final_norm
    # Every parameter, less the token and position tables.
    everything = sum(p.numel() for p in model.parameters())
    assert everything - counted.total == vocab * d + seq * d
    assert mfu.flops_per_token(counted, layers=layers, d_model=d, seq_len=seq) == (
        6 * counted.total + 12 * layers * d * seq
    )


def test_a_tied_output_projection_counts_once() -> None:
    embed = torch.nn.Embedding(100, 8)
    head = torch.nn.Linear(8, 100, bias=False)
    head.weight = embed.weight
    model = torch.nn.ModuleDict({"embed": embed, "head": head})
    assert mfu.matmul_parameters(model).total == 800


def test_frozen_weights_cost_forward_and_activation_gradients_only() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 2))
    model[0].requires_grad_(False)
    counted = mfu.matmul_parameters(model)
    assert (counted.total, counted.trained) == (110 + 22, 22)
    assert mfu.flops_per_token(counted, layers=0, d_model=10, seq_len=1) == 4 * 132 + 2 * 22
