"""DeepSpeed ZeRO stage 1, 2 or 3, with optional optimizer and parameter
offload. The generated config comes from the spec; the user's
``strategy.deepspeed.config`` is merged over it. Checkpoints are DeepSpeed's own
format (one set of files per rank)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from trainplane.dicts import merged
from trainplane.runtime.safe_loading import deepspeed_weights_only
from trainplane.runtime.strategies.base import (
    OptimizerArg,
    StrategyRunner,
    make_optimizer,
    on_host,
)

DS_TAG = "deepspeed"


def deepspeed_config(
    options: dict[str, Any],
    *,
    precision: str,
    micro_batch_size: int,
    grad_accum: int,
    max_grad_norm: float | None,
    on_gpu: bool,
) -> dict[str, Any]:
    stage = int(options.get("stage", 2))
    zero: dict[str, Any] = {"stage": stage}
    offload_optimizer = options.get("offload_optimizer", "none")
    offload_param = options.get("offload_param", "none")
    if offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": offload_optimizer, "pin_memory": on_gpu}
    if offload_param != "none":
        zero["offload_param"] = {"device": offload_param, "pin_memory": on_gpu}
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": grad_accum,
        "zero_optimization": zero,
        # The user's torch optimizer is kept even with offload; DeepSpeed's
        # CPU Adam is swapped in below where it is available.
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }
    if max_grad_norm is not None:
        config["gradient_clipping"] = max_grad_norm
    if precision == "bf16":
        config["bf16"] = {"enabled": True}
    elif precision == "fp16":
        config["fp16"] = {"enabled": True, "initial_scale_power": 16}
    return merged(config, options.get("config") or {})


def cpu_adam_for(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """DeepSpeed's fused CPU Adam in place of torch's Adam/AdamW when the
    optimizer state is offloaded to host memory on a GPU machine."""
    if type(optimizer) not in (torch.optim.Adam, torch.optim.AdamW):
        return optimizer
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam
    except ImportError:
        return optimizer
    defaults = optimizer.defaults
    return DeepSpeedCPUAdam(
        optimizer.param_groups,
        lr=defaults["lr"],
        betas=defaults["betas"],
        eps=defaults["eps"],
        weight_decay=defaults["weight_decay"],
        adamw_mode=type(optimizer) is torch.optim.AdamW,
    )


class DeepSpeedRunner(StrategyRunner):
    name = "deepspeed"
    format = "deepspeed"

    def prepare(self, model: torch.nn.Module, optimizer: OptimizerArg) -> tuple[Any, Any]:
        settings = self.settings
        on_gpu = settings.device.type == "cuda"
        os.environ.setdefault("DS_ACCELERATOR", "cuda" if on_gpu else "cpu")
        # DeepSpeed reads where it is from torchrun's variables, whatever launched us.
        os.environ.setdefault("LOCAL_RANK", str(settings.local_rank))
        os.environ.setdefault("RANK", str(settings.rank))
        os.environ.setdefault("WORLD_SIZE", str(settings.world_size))
        import deepspeed

        options = settings.strategy.get("deepspeed") or {}
        config = deepspeed_config(
            options,
            precision=settings.precision,
            micro_batch_size=settings.micro_batch_size or 1,
            grad_accum=settings.grad_accum,
            max_grad_norm=settings.max_grad_norm,
            on_gpu=on_gpu,
        )
        built = make_optimizer(optimizer, model.parameters())
        if on_gpu and options.get("offload_optimizer", "none") != "none":
            built = cpu_adam_for(built)
        if on_gpu:
            model = model.to(settings.device)
        engine, ds_optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=built, config=config
        )
        self.model = engine
        self.optimizer = ds_optimizer
        self.base_optimizer = built
        return engine, ds_optimizer

    def unwrapped(self) -> torch.nn.Module:
        return self.model.module

    def scales_loss_itself(self) -> bool:
        return True  # the engine divides by gradient_accumulation_steps

    def backward(self, loss: torch.Tensor, *, boundary: bool) -> None:
        del boundary  # the engine tracks the accumulation boundary itself
        self.model.backward(loss)

    def step(self) -> None:
        self.model.step()

    def micro_step(self) -> None:
        self.model.step()

    def save(self, folder: Path) -> None:
        self.model.save_checkpoint(
            str(folder),
            tag=DS_TAG,
            save_latest=False,
            exclude_frozen_parameters=not self.settings.save_frozen,
        )

    def load(self, folder: Path) -> None:
        with deepspeed_weights_only(self.model):  # its files, without unpickling code
            path, _ = self.model.load_checkpoint(
                str(folder),
                tag=DS_TAG,
                load_optimizer_states=True,
                load_lr_scheduler_states=False,
                load_module_strict=self.settings.save_frozen,
            )
        if path is None:
            raise RuntimeError(f"DeepSpeed found no checkpoint in {folder}")

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        if self.model.zero_optimization_partition_weights():
            # ZeRO-3: gathered one layer at a time onto rank 0's host memory.
            return self.model._zero3_consolidated_16bit_state_dict()
        # ZeRO-1/2 partition only optimizer states and gradients: every rank
        # holds the whole model.
        return on_host(self.unwrapped().state_dict()) if self.settings.rank == 0 else None
