"""DeepSpeed ZeRO stage 1, 2 or 3, with optional optimizer and parameter
offload. The generated config comes from the spec; the user's
``strategy.deepspeed.config`` is merged over it. Checkpoints are DeepSpeed's own
format (one set of files per rank).

Under ZeRO-3 a model built inside ``init_context`` (``TrainContext.model_init``)
is partitioned as it is created. The exported model is the optimizer's fp32
master copy of the weights that train, not the 16-bit copy the forward uses.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from trainplane.dicts import merged
from trainplane.jobs.spec import DeepSpeedOptions
from trainplane.runtime.safe_loading import deepspeed_weights_only
from trainplane.runtime.strategies.base import (
    OptimizerArg,
    StrategyRunner,
    StrategySettings,
    make_optimizer,
)
from trainplane.runtime.strategies.deepspeed_state import full_state, to_dtype

DS_TAG = "deepspeed"


def deepspeed_config(
    options: DeepSpeedOptions,
    *,
    precision: str,
    micro_batch_size: int,
    grad_accum: int,
    max_grad_norm: float | None,
    on_gpu: bool,
) -> dict[str, Any]:
    zero: dict[str, Any] = {"stage": options.stage}
    if options.offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": options.offload_optimizer, "pin_memory": on_gpu}
    if options.offload_param != "none":
        zero["offload_param"] = {"device": options.offload_param, "pin_memory": on_gpu}
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
    return merged(config, options.config)


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


def set_deepspeed_environment(settings: StrategySettings) -> None:
    """Before deepspeed is imported: its accelerator, and where it is, which
    it reads from torchrun's variables whatever launched us."""
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if settings.device.type == "cuda" else "cpu")
    os.environ.setdefault("LOCAL_RANK", str(settings.local_rank))
    os.environ.setdefault("RANK", str(settings.rank))
    os.environ.setdefault("WORLD_SIZE", str(settings.world_size))


def deepspeed_options(settings: StrategySettings) -> DeepSpeedOptions:
    """The spec's strategy.deepspeed, its defaults when the spec gave none."""
    return settings.strategy.deepspeed or DeepSpeedOptions()


def config_of(settings: StrategySettings) -> dict[str, Any]:
    return deepspeed_config(
        deepspeed_options(settings),
        precision=settings.precision,
        micro_batch_size=settings.micro_batch_size or 1,
        grad_accum=settings.grad_accum,
        max_grad_norm=settings.max_grad_norm,
        on_gpu=settings.device.type == "cuda",
    )


@contextlib.contextmanager
def hugging_face_sees_zero3(config: dict[str, Any]) -> Iterator[None]:
    """While open, transformers' ``from_pretrained`` builds under ZeRO-3's
    partitioning and loads each rank's share of the checkpoint (rank 0 reads
    the files, the others only shapes) instead of a whole copy per rank."""
    if importlib.util.find_spec("transformers") is None:
        yield
        return
    from transformers.integrations.deepspeed import HfDeepSpeedConfig, unset_hf_deepspeed_config

    marker = HfDeepSpeedConfig(config)  # transformers keeps only a weak reference
    try:
        yield
    finally:
        unset_hf_deepspeed_config()
        del marker


class DeepSpeedRunner(StrategyRunner):
    name = "deepspeed"
    format = "deepspeed"

    def _stage(self) -> int:
        return int(config_of(self.settings)["zero_optimization"]["stage"])

    @contextlib.contextmanager
    def init_context(self) -> Iterator[None]:
        if self._stage() != 3:
            yield
            return
        set_deepspeed_environment(self.settings)
        import deepspeed

        config = config_of(self.settings)
        # Each parameter is cast to the training dtype and partitioned as its
        # module's constructor returns: no rank holds more than its share.
        with deepspeed.zero.Init(config_dict_or_path=config), hugging_face_sees_zero3(config):
            yield

    def prepare(self, model: torch.nn.Module, optimizer: OptimizerArg) -> tuple[Any, Any]:
        settings = self.settings
        on_gpu = settings.device.type == "cuda"
        set_deepspeed_environment(settings)
        import deepspeed

        config = config_of(settings)
        built = make_optimizer(optimizer, model.parameters())
        if on_gpu and deepspeed_options(settings).offload_optimizer != "none":
            built = cpu_adam_for(built)
        if on_gpu:
            model = model.to(settings.device)
        engine, ds_optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=built, config=config
        )
        if settings.precision != "fp32":
            # The engine casts the weights, not what the forward is given.
            engine.module.register_forward_pre_hook(
                _inputs_to(settings.dtype), prepend=True, with_kwargs=True
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
        # The fp32 master of each parameter that trains, gathered one at a
        # time onto rank 0's host memory; the others as the module holds them.
        return full_state(self.unwrapped(), keep=self.settings.rank == 0)


def _inputs_to(dtype: torch.dtype) -> Any:
    def hook(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return to_dtype(args, dtype), to_dtype(kwargs, dtype)

    return hook
