"""The ``TrainingArguments`` (or TRL config) keyword arguments that make a
Hugging Face ``Trainer`` train as the job's spec says, so the spec, not the
script, picks the strategy::

    args = SFTConfig(max_steps=100, learning_rate=2e-4, **trainer_arguments())

- ``output_dir``: :func:`trainplane.script.checkpoint_dir` (the attempt's own
  folder; the callback publishes each ``checkpoint-N`` from there);
- ``checkpoint.every_steps``: ``save_strategy="steps"`` and ``save_steps``;
  ``keep_last``: ``save_total_limit`` (the local copies; the published ones
  follow the spec's retention);
- ``strategy.type``: ``fsdp`` gives FSDP2 (``fsdp`` and ``fsdp_config`` with
  version 2; on CPU workers the callback lets Accelerate shard, see
  :func:`let_accelerate_shard_on_cpu`), ``deepspeed`` a ZeRO config of the
  spec's stage and offload (runtime.strategies.deepspeed's, with the batch,
  clipping and precision left ``"auto"`` for the Trainer to fill), ``ddp``
  nothing;
- ``precision``: ``bf16``/``fp16`` (unset: fp32 on CPU workers, bf16 on GPUs
  that compute it natively), and ``use_cpu`` on a CPU cluster.

Outside trainplane (no spec) only ``output_dir`` (``./checkpoints``) and the
precision and ``use_cpu`` of the machine it runs on. What you pass to it
wins over all of these.
"""

from __future__ import annotations

import json
import os
from typing import Any

from trainplane import script
from trainplane.dicts import merged
from trainplane.jobs.precision import resolved_precision
from trainplane.jobs.spec import DeepSpeedOptions, FSDPOptions, TrainSpec, load_spec
from trainplane.runtime import env as tp_env

# The DeepSpeed settings the Trainer fills from its own arguments: given
# here, they would have to agree with those exactly.
TRAINER_FILLED = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "bf16": {"enabled": "auto"},
    "fp16": {"enabled": "auto"},
}


def job_spec() -> TrainSpec | None:
    """The job's spec (TRAINPLANE_SPEC); None outside trainplane."""
    document = os.environ.get(tp_env.SPEC)
    if not document:
        return None
    spec = load_spec(json.loads(document))
    return spec if isinstance(spec, TrainSpec) else None


def trainer_arguments(**yours: Any) -> dict[str, Any]:
    """Keyword arguments for ``TrainingArguments`` (``SFTConfig``, ``DPOConfig``,
    ...) from the job's spec, with ``yours`` over them."""
    spec = job_spec()
    on_gpu = _on_gpu()
    arguments: dict[str, Any] = {"output_dir": script.checkpoint_dir()}
    if spec is not None:
        arguments.update(checkpoint_arguments(spec))
        arguments.update(strategy_arguments(spec, on_gpu=on_gpu))
    arguments.update(precision_arguments(spec.precision if spec else None, on_gpu=on_gpu))
    if not on_gpu:
        arguments["use_cpu"] = True
    arguments.update(yours)
    return arguments


def checkpoint_arguments(spec: TrainSpec) -> dict[str, Any]:
    policy = spec.checkpoint
    arguments: dict[str, Any] = {"save_total_limit": policy.keep_last}
    if policy.every_steps:
        arguments.update(save_strategy="steps", save_steps=policy.every_steps)
    return arguments


def strategy_arguments(spec: TrainSpec, *, on_gpu: bool) -> dict[str, Any]:
    """What makes the Trainer (through Accelerate) wrap the model as
    ``strategy.type`` says."""
    strategy = spec.strategy
    if strategy.type == "fsdp":
        return {"fsdp": True, "fsdp_config": fsdp_config(strategy.fsdp or FSDPOptions(), on_gpu)}
    if strategy.type == "deepspeed":
        if not on_gpu:
            # DeepSpeed picks its accelerator when first imported, which the
            # Trainer's arguments do next.
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        return {"deepspeed": deepspeed_config(strategy.deepspeed or DeepSpeedOptions(), on_gpu)}
    if strategy.type == "auto":
        raise ValueError(
            "strategy.type auto reached the runtime unresolved: it is picked at submit; "
            "set strategy.type to ddp, fsdp or deepspeed"
        )
    return {}  # ddp: the Trainer's own DistributedDataParallel


def let_accelerate_shard_on_cpu(spec: TrainSpec | None) -> bool:
    """Under ``strategy.type: fsdp`` on CPU workers: Accelerate turns FSDP on
    for GPU (and other accelerator) worlds only, and would train a CPU world
    with DDP. FSDP2 itself shards CPU tensors over gloo, so the world, set up
    by the Trainer's arguments already, is labelled as a multi-device one
    before the Trainer asks Accelerate how to wrap the model. Returns whether
    it did; False when the arguments are not built yet (the callback's
    ``on_init_end`` then says FSDP is not on)."""
    if spec is None or spec.strategy.type != "fsdp" or _on_gpu():
        return False
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    state = PartialState._shared_state
    if state.get("distributed_type") != DistributedType.MULTI_CPU:
        return False
    state["distributed_type"] = DistributedType.MULTI_GPU
    return True


def undo_cpu_label() -> None:
    """The CPU world's own label again, where the Trainer turned out not to use
    FSDP: before ``train()`` wraps the model (DDP on CPU takes no device ids)."""
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    for state in (PartialState._shared_state, AcceleratorState._shared_state):
        if state.get("distributed_type") == DistributedType.MULTI_GPU:
            state["distributed_type"] = DistributedType.MULTI_CPU


def fsdp_config(options: FSDPOptions, on_gpu: bool) -> dict[str, Any]:
    config: dict[str, Any] = {"version": 2, "reshard_after_forward": options.reshard_after_forward}
    if options.cpu_offload and on_gpu:  # on CPU workers the parameters are there already
        config["cpu_offload"] = True
    return config


def deepspeed_config(options: DeepSpeedOptions, on_gpu: bool) -> dict[str, Any]:
    """The spec's ZeRO stage and offload as the runtime's DeepSpeed config,
    what the Trainer decides left ``"auto"``, the user's ``config`` over it."""
    from trainplane.runtime.strategies import deepspeed

    generated = deepspeed.deepspeed_config(
        options.model_copy(update={"config": {}}),
        precision="fp32",
        micro_batch_size=1,
        grad_accum=1,
        max_grad_norm=None,
        on_gpu=on_gpu,
    )
    return merged({**generated, **TRAINER_FILLED}, options.config)


def precision_arguments(requested: str | None, *, on_gpu: bool) -> dict[str, Any]:
    """The spec's precision; unset, the runtime's rule (jobs.precision)."""
    precision = resolved_precision(requested, bf16_gpu=on_gpu and _bf16_gpu())
    return {"bf16": precision == "bf16", "fp16": precision == "fp16"}


def _on_gpu() -> bool:
    device = os.environ.get(tp_env.DEVICE)
    if device:
        return device == "cuda"
    import torch

    return torch.cuda.is_available()


def _bf16_gpu() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
