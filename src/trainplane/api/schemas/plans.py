"""Bodies of ``POST /v1/jobs/plan``: what submitting a spec would do."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from trainplane.jobs.memory import GB
from trainplane.jobs.strategy_choice import HEADROOM
from trainplane.services.plans import JobPlan


class InputCheckOut(BaseModel):
    name: str = Field(description="The spec field that was checked (dataset.train, ...).")
    ok: bool = True
    detail: str


class PlannedPlacementOut(BaseModel):
    cluster: str | None = Field(description="Where it would start now; null when it would wait.")
    can_start_now: bool
    queue_position: int = Field(description="Its place in the queue if submitted now; 1 is next.")
    reason: str
    expected_start_in_seconds: float | None = Field(
        default=None, description="From the running jobs' progress; null: unknown."
    )
    expected_start_basis: str = ""


class StrategyEstimateOut(BaseModel):
    strategy: str = Field(description="ddp, fsdp, deepspeed zero-3 + optimizer offload, ...")
    total_gb: float = Field(description="Per GPU.")
    fits: bool | None = Field(description="Within the headroom of the GPUs compared with.")


class MemoryOut(BaseModel):
    strategy: str
    per_gpu_gb: dict[str, float] = Field(
        description="parameters, gradients, optimizer_states, buffers, activations, "
        "initialization (GPU only), framework."
    )
    total_gb: float
    gpu_memory_gb: float | None = Field(description="Of one GPU compared with; null: unknown.")
    fraction: float | None = Field(description="total_gb / gpu_memory_gb.")
    host_per_worker_gb: dict[str, float] = Field(description="What offload puts in host memory.")
    notes: list[str] = Field(description="What the estimate could not count, and why.")


class StrategyPlanOut(BaseModel):
    requested: str = Field(description="The spec's strategy.type.")
    chosen: str = Field(description="What would run.")
    spec: dict[str, Any] = Field(description="The strategy section the job would run with.")
    reason: str
    compared_with: str | None = Field(description="The cluster whose GPUs were compared with.")
    candidates: list[StrategyEstimateOut] = Field(description="For auto: every strategy tried.")


class CostOut(BaseModel):
    cluster: str | None = Field(description="Where it would run (or the cheapest that can).")
    price_per_gpu_hour: float | None
    expected_seconds: float | None = Field(description="Null when nothing to go by.")
    expected_cost: float | None
    max_cost: float | None = Field(description="At its max_runtime, when it has one.")
    basis: str


class PlanOut(BaseModel):
    """What submitting the spec would do. Nothing was created."""

    valid: bool = True
    spec: dict[str, Any] = Field(description="The validated spec, with defaults filled in.")
    checks: list[InputCheckOut] = Field(description="The files the job reads, as checked.")
    placement: PlannedPlacementOut
    strategy: StrategyPlanOut
    memory: MemoryOut | None = Field(description="Null without a model size to estimate from.")
    cost: CostOut

    @classmethod
    def from_plan(cls, plan: JobPlan) -> PlanOut:
        where = plan.placement
        start = where.expected_start
        strategy = plan.strategy
        found = strategy.estimate
        memory = strategy.gpu_memory_bytes
        gpus = plan.spec.resources.gpus
        cost = plan.cost
        seconds = cost.duration.seconds
        return cls(
            spec=plan.spec.model_dump(mode="json"),
            checks=[InputCheckOut(name=c.name, detail=c.detail) for c in plan.checks],
            placement=PlannedPlacementOut(
                cluster=where.cluster,
                can_start_now=where.can_start_now,
                queue_position=where.queue_position,
                reason=where.reason,
                expected_start_in_seconds=_rounded(start.after_seconds) if start else None,
                expected_start_basis=start.basis if start else "",
            ),
            strategy=StrategyPlanOut(
                requested=strategy.requested,
                chosen=strategy.chosen.label,
                spec=dict(strategy.chosen.spec()),
                reason=strategy.reason,
                compared_with=strategy.compared_with,
                candidates=[
                    StrategyEstimateOut(
                        strategy=e.strategy.label,
                        total_gb=_gb(e.total),
                        fits=(e.total <= HEADROOM * memory) if memory else None,
                    )
                    for e in strategy.candidates
                ],
            ),
            memory=None
            if found is None
            else MemoryOut(
                strategy=found.strategy.label,
                per_gpu_gb={k: _gb(v) for k, v in found.gpu.items()},
                total_gb=_gb(found.total),
                gpu_memory_gb=_gb(memory) if memory else None,
                fraction=round(found.total / memory, 4) if memory else None,
                host_per_worker_gb={k: _gb(v) for k, v in found.host.items()},
                notes=list(found.notes),
            ),
            cost=CostOut(
                cluster=cost.cluster,
                price_per_gpu_hour=cost.price_per_gpu_hour,
                expected_seconds=_rounded(seconds),
                expected_cost=_rounded(cost.cost(gpus, seconds), 4),
                max_cost=_rounded(cost.cost(gpus, cost.max_runtime_seconds), 4),
                basis=cost.duration.basis,
            ),
        )


def _gb(value: float) -> float:
    return round(value / GB, 3)


def _rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)
