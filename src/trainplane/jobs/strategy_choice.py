"""``strategy: auto``: the cheapest strategy whose memory estimate fits the
GPUs with headroom (pure code).

Cheapest means least communication and bookkeeping: DDP, then FSDP2, then
DeepSpeed ZeRO-3, then ZeRO-3 with the optimizer states and the parameters
offloaded to host memory. FSDP2 is left out under fp16, which it cannot
train without loss scaling (the spec refuses that pair). A strategy fits
when its estimate is at most :data:`HEADROOM` of one GPU's memory; the
margin covers what no estimate sees (a long sequence in the batch, a
library's workspace).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplane.jobs.memory import (
    GB,
    MemoryEstimate,
    ModelShape,
    StrategyChoice,
    Workload,
    estimate,
)

HEADROOM = 0.9
CANDIDATES = (
    StrategyChoice("ddp"),
    StrategyChoice("fsdp"),
    StrategyChoice("deepspeed", stage=3),
    StrategyChoice("deepspeed", stage=3, offload_optimizer=True, offload_param=True),
)


@dataclass(frozen=True)
class Choice:
    chosen: MemoryEstimate | None  # None: nothing fits
    candidates: tuple[MemoryEstimate, ...]  # every strategy tried, in order
    gpu_memory_bytes: float | None
    reason: str


def candidates_for(workload: Workload) -> tuple[StrategyChoice, ...]:
    """The strategies that can train ``workload``, cheapest first."""
    if workload.precision == "fp16":
        return tuple(c for c in CANDIDATES if c.type != "fsdp")
    return CANDIDATES


def gb(value: float) -> str:
    return f"{value / GB:,.1f} GB"


def fits(estimate_: MemoryEstimate, gpu_memory_bytes: float, *, headroom: float = HEADROOM) -> bool:
    return estimate_.total <= headroom * gpu_memory_bytes


def choose_strategy(
    model: ModelShape, workload: Workload, world_size: int, gpu_memory_bytes: float | None
) -> Choice:
    """``gpu_memory_bytes``: of one GPU of the cluster the job would run on;
    None when unknown (then DDP, the cheapest, with the reason saying so)."""
    tried: list[MemoryEstimate] = []
    if gpu_memory_bytes is None:
        first = estimate(model, workload, CANDIDATES[0], world_size)
        return Choice(
            first,
            (first,),
            None,
            "picked ddp, the cheapest: no cluster that can hold the job reports its GPU "
            f"memory (ddp needs about {gb(first.total)} per GPU)",
        )
    limit = HEADROOM * gpu_memory_bytes
    for candidate in candidates_for(workload):
        found = estimate(model, workload, candidate, world_size)
        tried.append(found)
        if fits(found, gpu_memory_bytes):
            skipped = "; ".join(f"{e.strategy.label} needs {gb(e.total)}" for e in tried[:-1])
            why = (
                f"{skipped} (over {gb(limit)}, {HEADROOM:.0%} of {gb(gpu_memory_bytes)}); "
                if skipped
                else ""
            )
            share = found.total / gpu_memory_bytes
            return Choice(
                found,
                tuple(tried),
                gpu_memory_bytes,
                f"{why}picked {candidate.label}: {gb(found.total)} per GPU, {share:.0%} of "
                f"{gb(gpu_memory_bytes)}",
            )
    last = tried[-1]
    return Choice(
        None,
        tuple(tried),
        gpu_memory_bytes,
        f"no strategy fits {gb(gpu_memory_bytes)} GPUs: even {last.strategy.label} needs "
        f"{gb(last.total)} per GPU on {world_size} GPUs",
    )
