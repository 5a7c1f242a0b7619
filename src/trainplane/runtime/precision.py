"""The precision a worker trains in, and the matmul settings that go with it."""

from __future__ import annotations

import torch

from trainplane.jobs.precision import allows_tf32, resolved_precision


def native_bf16(device: torch.device) -> bool:
    """A GPU that computes bf16 natively (compute capability 8.0 and up)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)


def training_precision(requested: str | None, device: torch.device) -> str:
    return resolved_precision(requested, bf16_gpu=native_bf16(device))


def set_matmul_precision(requested: str | None, device: torch.device) -> None:
    """TF32 for a GPU worker's fp32 matmuls unless fp32 was asked for by name.
    Through the one setter that keeps torch's old and new TF32 flags in step
    (reading the old one after setting only the new one raises)."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high" if allows_tf32(requested) else "highest")
