"""FSDP2 (``fully_shard``): parameters, gradients and optimizer states sharded
across ranks. Each block inside a ``ModuleList`` (the layers of a transformer)
is its own shard unit, then the root. The model is sharded on the meta device
and its shards filled from rank 0 (``sharded_init``): no rank ever holds the
whole model on its GPU. Built inside ``init_context`` (``TrainContext.model_init``)
it is on the meta device on every rank but 0, so only rank 0 ever holds the
whole model, in host memory. Checkpoints are sharded with
torch.distributed.checkpoint, so they load at another world size too."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from trainplane.jobs.spec import FSDPOptions
from trainplane.runtime.safe_loading import dcp_load
from trainplane.runtime.strategies.base import (
    OptimizerArg,
    StrategyRunner,
    clip,
    nothing,
    rebuild_optimizer,
)
from trainplane.runtime.strategies.sharded_init import materialize, release

DCP_FOLDER = "dcp"


def shard_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The blocks to shard one by one: every member of a ModuleList."""
    units: list[torch.nn.Module] = []
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList):
            units.extend(module)
    return units


class FSDPRunner(StrategyRunner):
    name = "fsdp"
    format = "dcp"

    def init_context(self) -> contextlib.AbstractContextManager[None]:
        # Rank 0 builds the model with its weights; the other ranks build the
        # architecture alone, taking no memory: prepare() fills their shards
        # from rank 0's weights.
        return nothing() if self.settings.rank == 0 else torch.device("meta")

    def prepare(self, model: torch.nn.Module, optimizer: OptimizerArg) -> tuple[Any, Any]:
        settings = self.settings
        if settings.precision == "fp16":
            # Refused at submit too (jobs.spec): without loss scaling fp16
            # gradients underflow silently.
            raise ValueError("fp16 under FSDP2 is not supported (no loss scaling): use bf16")
        options = settings.strategy.fsdp or FSDPOptions()
        names_by_id = {id(param): name for name, param in model.named_parameters()}
        mesh = init_device_mesh(settings.device.type, (settings.world_size,))
        kwargs: dict[str, Any] = {
            "mesh": mesh,
            "reshard_after_forward": options.reshard_after_forward,
        }
        if settings.precision != "fp32":
            kwargs["mp_policy"] = MixedPrecisionPolicy(
                param_dtype=settings.dtype, reduce_dtype=torch.float32
            )
        shard_device = settings.device
        if options.cpu_offload and settings.device.type == "cuda":
            # Parameters live in host memory between uses; on a CPU cluster
            # they are there already.
            kwargs["offload_policy"] = CPUOffloadPolicy()
            shard_device = torch.device("cpu")
        weights = release(model, rank=settings.rank)
        for unit in shard_units(model):
            fully_shard(unit, **kwargs)
        fully_shard(model, **kwargs)
        materialize(
            model,
            weights,
            rank=settings.rank,
            shard_device=shard_device,
            compute_device=settings.device,
        )
        del weights  # rank 0's host copy
        self.model = model
        self.optimizer = rebuild_optimizer(optimizer, model, names_by_id)
        self.base_optimizer = self.optimizer
        return model, self.optimizer

    def backward(self, loss: torch.Tensor, *, boundary: bool) -> None:
        # Between boundaries the gradients accumulate unsharded-reduced locally.
        self.model.set_requires_gradient_sync(boundary)
        loss.backward()

    def step(self) -> None:
        assert self.optimizer is not None
        clip(self.model.parameters(), self.settings.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def _options(self) -> StateDictOptions:
        # Without the frozen parameters, loading cannot be strict about them.
        keep = self.settings.save_frozen
        return StateDictOptions(ignore_frozen_params=not keep, strict=keep)

    def save(self, folder: Path) -> None:
        model_state, optimizer_state = get_state_dict(
            self.model, self.optimizer, options=self._options()
        )
        dcp.save(
            {"model": model_state, "optimizer": optimizer_state},
            checkpoint_id=folder / DCP_FOLDER,
        )

    def load(self, folder: Path) -> None:
        model_state, optimizer_state = get_state_dict(
            self.model, self.optimizer, options=self._options()
        )
        state = {"model": model_state, "optimizer": optimizer_state}
        dcp_load(state, folder / DCP_FOLDER)  # without unpickling code
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
            options=self._options(),
        )

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        # Gathered shard by shard into rank 0's host memory; the other ranks
        # get an empty dict back.
        state = get_model_state_dict(
            self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        return state if self.settings.rank == 0 else None
