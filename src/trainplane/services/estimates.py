"""Memory estimates for a spec against the registered clusters: what ``plan``
shows, what ``strategy: auto`` resolves to at submit, and which jobs submit
refuses because they could not fit any GPU.

The model comes from the spec's ``model`` section, and for a fine-tune from
its base model's config.json (the spec's fields win). The GPUs compared
with are those of the clusters that could hold the job's shape and say how
much memory a GPU has. ``auto`` picks against the smallest of them, so the
choice fits wherever the job is placed; a job is refused only when it fits
none, not even the largest.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from trainplane.jobs.memory import (
    GB,
    MemoryEstimate,
    ModelShape,
    StrategyChoice,
    Workload,
    estimate,
)
from trainplane.jobs.model_shapes import UnknownShape, shape_from_config
from trainplane.jobs.placement import ClusterState, Demand, can_ever_hold
from trainplane.jobs.precision import resolved_precision
from trainplane.jobs.spec import FinetuneSpec, TrainSpec
from trainplane.jobs.strategy_choice import (
    CANDIDATES,
    HEADROOM,
    Choice,
    candidates_for,
    choose_strategy,
    gb,
)


@dataclass(frozen=True)
class StrategyPlan:
    requested: str  # the spec's strategy.type
    chosen: StrategyChoice  # what runs (for auto: what was picked)
    estimate: MemoryEstimate | None  # of the chosen strategy; None without a model size
    candidates: tuple[MemoryEstimate, ...]  # auto: every strategy tried, in order
    gpu_memory_bytes: float | None  # of the GPUs compared with
    compared_with: str | None  # the cluster those GPUs are in
    reason: str
    refusal: tuple[str, str] | None = None  # (field, message) when submit must refuse


def shape_of(
    spec: TrainSpec | FinetuneSpec, model_config: dict[str, Any] | None
) -> ModelShape | None:
    info = spec.model
    shape: ModelShape | None = None
    if isinstance(spec, FinetuneSpec) and model_config is not None:
        lora = spec.method.type == "lora"
        try:
            shape = shape_from_config(
                model_config,
                lora_rank=spec.method.r if lora else None,
                lora_targets=spec.method.target_modules if lora else None,
            )
        except UnknownShape:
            shape = None
    if info is not None and info.parameters is not None:
        base = shape or ModelShape(info.parameters)
        shape = replace(base, parameters=info.parameters)
    if shape is None or info is None:
        return shape
    overrides = {
        "trainable": info.trainable_parameters,
        "layers": info.layers,
        "hidden_size": info.hidden_size,
        "heads": info.heads,
        "vocab_size": info.vocab_size,
    }
    return replace(shape, **{k: v for k, v in overrides.items() if v is not None})


def workload_of(spec: TrainSpec | FinetuneSpec, *, on_gpu: bool = True) -> Workload:
    info = spec.model
    micro_batch = info.micro_batch_size if info else None
    sequence = info.sequence_length if info else None
    if isinstance(spec, FinetuneSpec):
        micro_batch = micro_batch or spec.hyperparameters.micro_batch_size
        sequence = sequence or spec.hyperparameters.max_seq_len
    return Workload(
        precision=resolved_precision(spec.precision, bf16_gpu=on_gpu),
        micro_batch_size=micro_batch,
        sequence_length=sequence,
        activation_checkpointing=bool(info and info.activation_checkpointing),
        lora=isinstance(spec, FinetuneSpec) and spec.method.type == "lora",
    )


def requested_strategy(spec: TrainSpec | FinetuneSpec) -> StrategyChoice:
    strategy = spec.strategy
    if strategy.type == "deepspeed":
        options = strategy.deepspeed
        return StrategyChoice(
            "deepspeed",
            stage=options.stage if options else 2,
            offload_optimizer=bool(options and options.offload_optimizer != "none"),
            offload_param=bool(options and options.offload_param != "none"),
        )
    if strategy.type == "fsdp":
        return StrategyChoice(
            "fsdp", offload_optimizer=bool(strategy.fsdp and strategy.fsdp.cpu_offload)
        )
    return StrategyChoice(strategy.type if strategy.type != "auto" else "ddp")


def plan_strategy(
    spec: TrainSpec | FinetuneSpec,
    model_config: dict[str, Any] | None,
    clusters: list[ClusterState],
) -> StrategyPlan:
    resources = spec.resources
    demand = Demand("new", resources.gpus, resources.gpus_per_node, resources.gpu_type)
    holders = [c for c in clusters if can_ever_hold(c, demand)]
    gpu_holders = [c for c in holders if c.accelerator.lower() != "cpu"]
    sized = sorted((c for c in gpu_holders if c.gpu_memory_gb), key=lambda c: c.gpu_memory_gb or 0)
    smallest, largest = (sized[0], sized[-1]) if sized else (None, None)
    on_gpu = bool(gpu_holders) or not holders
    shape = shape_of(spec, model_config)
    workload = workload_of(spec, on_gpu=on_gpu)
    requested = spec.strategy.type
    n = resources.gpus

    if shape is None:
        chosen = requested_strategy(spec)
        why = (
            "picked ddp, the cheapest: without model.parameters (or a fine-tune's config.json) "
            "there is no memory estimate"
            if requested == "auto"
            else "no memory estimate: give model.parameters"
        )
        return StrategyPlan(requested, chosen, None, (), None, None, why)

    memory = smallest.gpu_memory_gb * GB if smallest and smallest.gpu_memory_gb else None
    where = smallest.name if smallest else None
    if requested == "auto":
        if not on_gpu:
            first = estimate(shape, workload, CANDIDATES[0], n, on_gpu=False)
            why = "picked ddp, the cheapest: the job runs on CPU workers, which have no GPU memory"
            return StrategyPlan(requested, CANDIDATES[0], first, (first,), None, None, why)
        choice = choose_strategy(shape, workload, n, memory)
        if choice.chosen is not None:
            return _picked(requested, choice, choice.chosen, where)
        return _most_sharded_or_refuse(requested, shape, workload, n, largest, choice.candidates)

    chosen = requested_strategy(spec)
    found = estimate(shape, workload, chosen, n, on_gpu=on_gpu)
    if memory is None:
        return StrategyPlan(requested, chosen, found, (), None, None, _need(found, None))
    if largest is not None and largest.gpu_memory_gb and found.total > largest.gpu_memory_gb * GB:
        most = estimate(shape, workload, CANDIDATES[-1], n)
        better = next(
            (
                e
                for e in (estimate(shape, workload, c, n) for c in candidates_for(workload))
                if e.total <= largest.gpu_memory_gb * GB
            ),
            None,
        )
        hint = (
            f"; strategy {better.strategy.label} would need {gb(better.total)} (or use auto)"
            if better is not None
            else f"; even {most.strategy.label} would need {gb(most.total)}"
        )
        field = "strategy.type" if better is not None else _size_field(spec)
        message = (
            f"{_need(found, largest.gpu_memory_gb * GB)}: more than the "
            f"{gb(largest.gpu_memory_gb * GB)} GPUs of cluster {largest.name}, the largest "
            f"that can hold the job{hint}"
        )
        return StrategyPlan(
            requested, chosen, found, (), memory, where, message, refusal=(field, message)
        )
    return StrategyPlan(requested, chosen, found, (), memory, where, _need(found, memory))


def _most_sharded_or_refuse(
    requested: str,
    shape: ModelShape,
    workload: Workload,
    n: int,
    largest: ClusterState | None,
    tried: tuple[MemoryEstimate, ...],
) -> StrategyPlan:
    """Nothing fits the smallest GPUs: the first strategy that fits the
    largest ones, or a refusal when not even the most sharded does."""
    assert largest is not None and largest.gpu_memory_gb
    memory = largest.gpu_memory_gb * GB
    choice = choose_strategy(shape, workload, n, memory)
    if choice.chosen is not None:
        return _picked(
            requested, choice, choice.chosen, largest.name,
            suffix=f" (on the larger GPUs of cluster {largest.name})",
        )  # fmt: skip
    message = (
        f"{shape.parameters:.3g} parameters on {n} GPUs fit no cluster: {choice.reason} "
        f"(cluster {largest.name} has the largest, {gb(memory)})"
    )
    return StrategyPlan(
        requested,
        tried[-1].strategy,
        tried[-1],
        tried,
        memory,
        largest.name,
        message,
        refusal=("model.parameters", message),
    )


def _picked(
    requested: str, choice: Choice, chosen: MemoryEstimate, where: str | None, *, suffix: str = ""
) -> StrategyPlan:
    return StrategyPlan(
        requested,
        chosen.strategy,
        chosen,
        choice.candidates,
        choice.gpu_memory_bytes,
        where,
        choice.reason + suffix,
    )


def _need(found: MemoryEstimate, memory: float | None) -> str:
    share = f", {found.total / memory:.0%} of {gb(memory)}" if memory else ""
    # A strategy the spec names is refused only past the whole GPU; between
    # the headroom auto keeps and that, it runs, but the user should know.
    tight = (
        f"; that is above the {HEADROOM:.0%} of a GPU strategy auto stays under, so it "
        "may run out of memory (auto would shard more)"
        if memory and HEADROOM * memory < found.total <= memory
        else ""
    )
    return f"{found.strategy.label} needs about {gb(found.total)} per GPU{share}{tight}"


def _size_field(spec: TrainSpec | FinetuneSpec) -> str:
    if spec.model is not None and spec.model.parameters is not None:
        return "model.parameters"
    return "base_model" if isinstance(spec, FinetuneSpec) else "model.parameters"


def resolved_spec_document(document: dict[str, Any], plan: StrategyPlan) -> dict[str, Any]:
    """The stored spec of a job submitted with ``strategy: auto``: the chosen
    strategy in its place, keeping the options given for it."""
    if plan.requested != "auto":
        return document
    given = document.get("strategy") or {}
    chosen: dict[str, Any] = dict(plan.chosen.spec())
    kind = chosen["type"]
    # Options given with auto apply to the strategy picked, except those the
    # pick itself decides (ZeRO stage, offload).
    kept = {"deepspeed": ("config",), "fsdp": ("reshard_after_forward",)}.get(kind, ())
    extra = {k: v for k, v in (given.get(kind) or {}).items() if k in kept}
    if extra:
        chosen[kind] = {**(chosen.get(kind) or {}), **extra}
    return {**document, "strategy": chosen}
