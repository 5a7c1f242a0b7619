"""Materializing a model shard by shard, for FSDP2: the whole model is never
on a GPU, and on no rank but 0 in host memory either.

The model given to ``prepare`` holds its weights on rank 0; on the others
it may be built on the meta device (``with torch.device("meta"):``), which
takes no memory, or be a full copy (it is dropped). Every rank moves its
copy to the meta device, shards it there (``fully_shard`` allocates nothing
for meta parameters), allocates only its shards (``to_empty``) and receives
them from rank 0 one parameter at a time. A model on the meta device on
every rank is initialized in its shards by each module's
``reset_parameters``.

Taking every value from rank 0 also means that ranks which built their
copies with different seeds still train one model, as under DDP.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

from trainplane.runtime.collective import broadcast

# What rank 0 holds, as every rank learns it.
WHOLE, ON_META, PARTLY_ON_META = "whole", "on meta", "partly on meta"


@dataclass
class HostWeights:
    """Rank 0's weights, kept while its module is moved to the meta device."""

    state: dict[str, torch.Tensor]  # the state dict (parameters, persistent buffers)
    buffers: dict[str, torch.Tensor]  # every buffer, the non-persistent ones too


def _tensors(model: torch.nn.Module) -> itertools.chain[torch.Tensor]:
    return itertools.chain(model.parameters(), model.buffers())


def holding(model: torch.nn.Module) -> str:
    on_meta = [tensor.is_meta for tensor in _tensors(model)]
    if not any(on_meta):
        return WHOLE
    return ON_META if all(on_meta) else PARTLY_ON_META


def release(model: torch.nn.Module, *, rank: int) -> HostWeights | None:
    """Move ``model`` to the meta device on every rank, keeping rank 0's
    weights (returned there). Collective."""
    held = broadcast(holding(model) if rank == 0 else None)
    if held == PARTLY_ON_META:
        raise ValueError(
            "the model given to prepare() has some tensors on the meta device on rank 0: "
            "under FSDP rank 0 holds all the weights (the other ranks may build the model "
            "on the meta device), or every rank builds all of it on the meta device"
        )
    kept = None
    if held == WHOLE and rank == 0:
        kept = HostWeights(
            state={name: t.detach() for name, t in model.state_dict().items()},
            buffers={name: b.detach() for name, b in model.named_buffers()},
        )
    _to_meta(model)
    return kept if held == WHOLE else None


def _to_meta(model: torch.nn.Module) -> None:
    # Swapped in place: shared (tied) parameters stay shared and the
    # optimizer's references stay valid, where Module.to("meta") would
    # make a new parameter per module.
    with torch.no_grad():
        for parameter in model.parameters():
            if not parameter.is_meta:
                empty = torch.empty_like(parameter, device="meta")
                torch.utils.swap_tensors(
                    parameter, torch.nn.Parameter(empty, requires_grad=parameter.requires_grad)
                )
        for module in model.modules():
            for name, buffer in module._buffers.items():
                if buffer is not None and not buffer.is_meta:
                    module._buffers[name] = torch.empty_like(buffer, device="meta")


def materialize(
    model: torch.nn.Module,
    weights: HostWeights | None,
    *,
    rank: int,
    shard_device: torch.device,
    compute_device: torch.device,
) -> None:
    """Allocate the sharded ``model``'s shards on ``shard_device`` (host memory
    under CPU offload) and its buffers on ``compute_device``, then fill them:
    from rank 0's ``weights`` (broadcast one tensor at a time), or, when the
    model was on the meta device everywhere, with ``reset_parameters``.
    Collective."""
    from_rank0 = broadcast(weights is not None if rank == 0 else None)
    model.to_empty(device=shard_device)
    if shard_device != compute_device:
        for module in model.modules():
            for name, buffer in module._buffers.items():
                if buffer is not None:
                    module._buffers[name] = buffer.to(compute_device)
    if not from_rank0:
        _reset_everywhere(model)
        return
    set_model_state_dict(
        model,
        weights.state if weights is not None else {},
        options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
    )
    # Non-persistent buffers (rotary tables, masks) are in no state dict.
    for name, buffer in model.named_buffers():
        if weights is not None:
            buffer.copy_(weights.buffers[name])
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.broadcast(buffer, src=0)


def _reset_everywhere(model: torch.nn.Module) -> None:
    owners = [
        (name, module)
        for name, module in model.named_modules()
        if next(itertools.chain(module.parameters(False), module.buffers(False)), None) is not None
    ]
    lacking = [name or type(m).__name__ for name, m in owners if not hasattr(m, "reset_parameters")]
    if lacking:
        raise ValueError(
            "the model was on the meta device on every rank, and these modules have no "
            f"reset_parameters() to initialize them: {', '.join(lacking[:5])}; build the "
            "model with its weights on rank 0 (on the CPU) instead"
        )
    with torch.no_grad():
        for _, module in owners:
            module.reset_parameters()
