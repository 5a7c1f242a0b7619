"""Tensors in and out of a DeepSpeed engine: the whole model's state with the
optimizer's fp32 master weights, and a batch cast to the engine's dtype."""

from __future__ import annotations

from typing import Any

import torch


def to_dtype(value: Any, dtype: torch.dtype) -> Any:
    """``value`` with every floating-point tensor in it (through tuples, lists
    and dicts) cast to ``dtype``; integer tensors (token ids, labels) and
    everything else as they are."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, dict):
        return {key: to_dtype(item, dtype) for key, item in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(to_dtype(item, dtype) for item in value)
    return value


def fp32_master(parameter: torch.nn.Parameter) -> torch.Tensor | None:
    """The whole fp32 master copy of a parameter that trains, from the ZeRO
    optimizer's partitions (collective: every rank calls it for the same
    parameter); None for a frozen one, which has none."""
    if not parameter.requires_grad:
        return None
    from deepspeed.utils import safe_get_full_fp32_param

    return safe_get_full_fp32_param(parameter)


def whole(parameter: torch.nn.Parameter) -> torch.Tensor:
    """A ZeRO-3 parameter gathered (collective), or the parameter itself."""
    if not hasattr(parameter, "ds_id"):
        return parameter.detach()
    import deepspeed

    with deepspeed.zero.GatheredParameters([parameter], modifier_rank=None):
        return parameter.detach().clone()


def full_state(module: torch.nn.Module, *, keep: bool) -> dict[str, torch.Tensor] | None:
    """``module``'s state dict with the master weights, in host memory where
    ``keep`` (rank 0), else None. Collective: every rank walks the same
    parameters in the same order; one whole parameter at a time."""
    state: dict[str, torch.Tensor] = {}
    done: dict[int, torch.Tensor] = {}  # tied parameters: gathered once
    for name, parameter in module.named_parameters(remove_duplicate=False):
        if id(parameter) not in done:
            master = fp32_master(parameter)
            value = master if master is not None else whole(parameter)
            # A copy: the model keeps training (or is freed) after the export.
            done[id(parameter)] = value.to("cpu", copy=True) if keep else value
        if keep:
            state[name] = done[id(parameter)]
        else:
            done[id(parameter)] = torch.empty(0)  # seen; nothing kept
    if not keep:
        return None
    for name, buffer in module.named_buffers(remove_duplicate=False):
        owner, _, attribute = name.rpartition(".")
        if attribute not in module.get_submodule(owner)._non_persistent_buffers_set:
            state[name] = buffer.detach().to("cpu", copy=True)
    return state
