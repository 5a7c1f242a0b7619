"""Model FLOPs utilization for the GPU benchmarks (gpu_check.py, gpu_suite.py).

MFU = model FLOPs per token x tokens/s / the GPU's peak dense bf16 FLOP/s.

FLOPs per token, forward and backward, are 6 N + 12 L d s (N the parameters
that take part in matrix multiplies, L layers, d the model width, s the
sequence length; the second term is attention's scores and weighted sum).
Embedding tables are looked up, not multiplied, so they are not in N: only
an output projection is (a tied one counts once, as the projection). With
LoRA only the adapters' weight gradients are computed, so a frozen weight
costs 4 FLOPs per token instead of 6.

The peak is the datasheet's dense (no sparsity) bf16 Tensor Core figure of
the exact part, found from ``torch.cuda.get_device_name()``. Parts of one
name differ (an H100 PCIe peaks ~24% below an H100 SXM), so a name that is
not known exactly gets no peak, and its MFU is printed as unknown rather
than guessed; ``--peak-tflops`` gives it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

# (pattern over the device name without "NVIDIA ", part, dense bf16 TFLOPS)
# Names as CUDA reports them, e.g. "NVIDIA H100 80GB HBM3" for the SXM part.
_PARTS: tuple[tuple[str, str, float], ...] = (
    (r"H100 80GB HBM3|H100 SXM5?( \d+GB)?", "H100 SXM", 989.4),
    (r"H100 (\d+GB )?PCIe", "H100 PCIe", 756.0),
    (r"H100 NVL", "H100 NVL", 835.5),
    (r"H200( 141GB HBM3e)?|H200 SXM( \d+GB)?", "H200 SXM", 989.4),
    (r"H200 NVL", "H200 NVL", 835.5),
    (r"GH200( \d+GB)?( HBM3e?)?", "GH200", 989.4),
    (r"H800( 80GB HBM3)?", "H800 SXM", 989.4),
    (r"H800 PCIe", "H800 PCIe", 756.0),
    (r"A100-SXM4-(40|80)GB", "A100 SXM", 312.0),
    (r"A100-PCIE-(40|80)GB|A100 80GB PCIe", "A100 PCIe", 312.0),
    (r"L40S", "L40S", 362.05),
    (r"L40", "L40", 181.05),
    (r"L4", "L4", 121.0),
    (r"A10", "A10", 125.0),
)


@dataclass(frozen=True)
class Peak:
    part: str
    tflops: float


def peak_for(device_name: str) -> Peak | None:
    """The dense bf16 peak of the part ``device_name`` names, or None when
    the name is not known exactly (an unknown part, a new variant)."""
    name = re.sub(r"^NVIDIA\s+", "", device_name.strip(), flags=re.IGNORECASE)
    for pattern, part, tflops in _PARTS:
        if re.fullmatch(pattern, name, flags=re.IGNORECASE):
            return Peak(part, tflops)
    return None


@dataclass(frozen=True)
class MatmulParameters:
    total: int  # parameters that take part in matrix multiplies
    trained: int  # of those, the ones that get weight gradients


def matmul_parameters(model: torch.nn.Module) -> MatmulParameters:
    """N of 6N: every parameter but those only ever used as embedding tables
    (a weight shared with a linear layer, a tied output projection, counts)."""
    in_tables = {
        id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()
    }
    in_matmuls = {
        id(p)
        for m in model.modules()
        if not isinstance(m, torch.nn.Embedding)
        for p in m.parameters(recurse=False)
    }
    seen: set[int] = set()
    total = trained = 0
    for parameter in model.parameters():  # each shared parameter once
        key = id(parameter)
        if key in seen or (key in in_tables and key not in in_matmuls):
            continue
        seen.add(key)
        total += parameter.numel()
        trained += parameter.numel() if parameter.requires_grad else 0
    return MatmulParameters(total, trained)


def flops_per_token(
    parameters: MatmulParameters, *, layers: int, d_model: int, seq_len: int
) -> float:
    """Forward (2N) and backward (2N for the activations' gradients, 2N for
    the trained weights' gradients) plus attention, 12 L d s."""
    return 4 * parameters.total + 2 * parameters.trained + 12 * layers * d_model * seq_len


def mfu(tokens_per_second: float, per_token: float, peak: Peak | None) -> float | None:
    if peak is None:
        return None
    return tokens_per_second * per_token / (peak.tflops * 1e12)


def shown(value: float | None) -> str:
    return f"{value:.1%}" if value is not None else "unknown"
