"""Which precision a job trains in when its spec leaves ``precision`` unset
(pure code: the runtime and the memory estimate agree on it)."""

from __future__ import annotations

PRECISIONS = ("fp32", "bf16", "fp16")


def resolved_precision(requested: str | None, *, bf16_gpu: bool) -> str:
    """``requested`` when the spec names one; otherwise bf16 on GPUs that
    compute it natively (Ampere and later: the weights the optimizer steps stay
    fp32 under every strategy) and fp32 elsewhere, where bf16 would only be
    emulated."""
    if requested is not None:
        if requested not in PRECISIONS:
            raise ValueError(f"precision {requested!r} is not one of {', '.join(PRECISIONS)}")
        return requested
    return "bf16" if bf16_gpu else "fp32"


def allows_tf32(requested: str | None) -> bool:
    """TensorFloat-32 for the fp32 matmuls a GPU job still does (under bf16,
    those outside autocast; with precision unset, all), unless the spec asks
    for fp32 by name: then fp32 means IEEE fp32."""
    return requested != "fp32"


def loaded_precision(precision: str, *, lora: bool, strategy: str) -> str:
    """The precision the fine-tune recipe loads its base model in: the
    training precision where no fp32 copy of the loaded weights is needed (a
    LoRA base does not train, and DeepSpeed keeps its own fp32 master copy in
    the optimizer); fp32 for a full fine-tune under DDP or FSDP2, which steps
    the module's own weights (the strategy casts for the forward)."""
    if precision == "fp32" or not (lora or strategy == "deepspeed"):
        return "fp32"
    return precision
