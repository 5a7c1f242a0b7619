"""What every strategy provides, and the parts they share."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainplane.jobs.spec import Strategy

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

OptimizerArg = torch.optim.Optimizer | Callable[[Any], torch.optim.Optimizer]


@dataclass
class StrategySettings:
    strategy: Strategy  # the spec's strategy section
    precision: str
    device: torch.device
    rank: int
    local_rank: int
    world_size: int
    grad_accum: int = 1
    max_grad_norm: float | None = None
    micro_batch_size: int | None = None
    # False: checkpoints leave out the parameters that do not train (a LoRA
    # fine-tune's base weights), which prepare() rebuilds the same on resume.
    save_frozen: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.precision]


class StrategyRunner:
    """Wraps one model and optimizer; saves and loads their state.

    ``save`` writes this rank's files into ``folder`` (a folder of its own);
    ``load`` reads from a folder holding every rank's files.
    """

    name = "base"
    format = "state-dict"

    def __init__(self, settings: StrategySettings) -> None:
        self.settings = settings
        self.model: Any = None
        self.optimizer: Any = None
        # The torch optimizer whose param_groups an LR scheduler adjusts (under
        # DeepSpeed, the one inside its ZeRO wrapper).
        self.base_optimizer: torch.optim.Optimizer | None = None

    # --- setup ---------------------------------------------------------------
    def init_context(self) -> contextlib.AbstractContextManager[None]:
        """Where the model is built before ``prepare`` (see TrainContext.model_init)."""
        return nothing()

    def prepare(self, model: torch.nn.Module, optimizer: OptimizerArg) -> tuple[Any, Any]:
        raise NotImplementedError

    def unwrapped(self) -> torch.nn.Module:
        return self.model

    # --- one micro-batch ----------------------------------------------------------
    def backward(self, loss: torch.Tensor, *, boundary: bool) -> None:
        raise NotImplementedError

    def step(self) -> None:
        """Called once per accumulation boundary: clip, step, zero the grads."""
        raise NotImplementedError

    def micro_step(self) -> None:
        """Called on the micro-batches between boundaries (DeepSpeed counts them)."""

    def scales_loss_itself(self) -> bool:
        return False

    # --- state ---------------------------------------------------------------------
    def save(self, folder: Path) -> None:
        raise NotImplementedError

    def load(self, folder: Path) -> None:
        raise NotImplementedError

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The whole model's state dict on rank 0, in host memory; None on the
        other ranks. Collective: call it on every rank."""
        raise NotImplementedError

    def extra_state(self) -> dict[str, Any]:
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        del state


def make_optimizer(optimizer: OptimizerArg, parameters: Any) -> torch.optim.Optimizer:
    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    return optimizer(parameters)


def rebuild_optimizer(
    optimizer: OptimizerArg,
    model: torch.nn.Module,
    names_by_id: dict[int, str],
) -> torch.optim.Optimizer:
    """An optimizer over ``model``'s current parameters with the settings of
    ``optimizer``, which was built over the parameters before they were
    replaced (FSDP2 swaps them for sharded ones). A factory is simply called."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        return optimizer(model.parameters())
    current = dict(model.named_parameters())
    groups = []
    for group in optimizer.param_groups:
        settings = {key: value for key, value in group.items() if key != "params"}
        params = [current[names_by_id[id(param)]] for param in group["params"]]
        groups.append({**settings, "params": params})
    return type(optimizer)(groups)


def frozen_names(model: torch.nn.Module) -> set[str]:
    """The state-dict names of the parameters that do not train (every name
    of a shared one)."""
    return {
        name
        for name, parameter in model.named_parameters(remove_duplicate=False)
        if not parameter.requires_grad
    }


def without(state: dict[str, Any], names: set[str]) -> dict[str, Any]:
    return {key: value for key, value in state.items() if key not in names}


def check_loaded(missing: list[str], unexpected: list[str], frozen: set[str]) -> None:
    """A checkpoint without the frozen parameters must have all the others."""
    lacking = [key for key in missing if key not in frozen]
    if lacking or unexpected:
        raise RuntimeError(
            f"the checkpoint does not fit the model (missing {lacking[:5]}, "
            f"unexpected {unexpected[:5]})"
        )


def on_host(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: value.detach().cpu() for key, value in state.items()}


@contextlib.contextmanager
def nothing() -> Iterator[None]:
    yield


def clip(parameters: Any, max_norm: float | None) -> None:
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(parameters, max_norm)
