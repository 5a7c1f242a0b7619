"""Bodies of ``POST /v1/jobs/plan``: what submitting a spec would do. A
sweep's plan is its largest trial's, with the sweep's spec and a ``sweep``
section for the whole search."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from trainplane.jobs.memory import GB
from trainplane.jobs.strategy_choice import HEADROOM
from trainplane.services.plans import JobPlan, SweepPlan


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


class TrialGpusOut(BaseModel):
    min: int
    max: int


class SweepPlanOut(BaseModel):
    trials: int = Field(description="The most trials the search runs.")
    parallel: int = Field(description="Trials at once.")
    gpus_per_trial: TrialGpusOut
    peak_gpus: int = Field(description="parallel x the most GPUs of a trial.")
    worst_case_gpu_hours: float | None = Field(
        description="Every trial on the most GPUs for its max_runtime; null: unbounded."
    )
    worst_case_cost: float | None = Field(description="At the price of the trial's cluster.")
    basis: str
    trial: str = Field(description="Which trial the placement, strategy and cost are of.")


class PlanOut(BaseModel):
    """What submitting the spec would do. Nothing was created."""

    valid: bool = True
    spec: dict[str, Any] = Field(description="The validated spec, with defaults filled in.")
    checks: list[InputCheckOut] = Field(description="The files the job reads, as checked.")
    placement: PlannedPlacementOut
    strategy: StrategyPlanOut
    memory: MemoryOut | None = Field(description="Null without a model size to estimate from.")
    cost: CostOut
    sweep: SweepPlanOut | None = Field(
        default=None, description="For a sweep: the whole search; the rest is its largest trial."
    )

    @classmethod
    def from_plan(cls, plan: JobPlan | SweepPlan) -> PlanOut:
        if isinstance(plan, SweepPlan):
            return cls._of_sweep(plan)
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

    @classmethod
    def _of_sweep(cls, plan: SweepPlan) -> PlanOut:
        spec, trial = plan.spec, plan.trial
        fewest, most = plan.gpus_per_trial
        seconds = trial.cost.max_runtime_seconds
        count = spec.trial_count
        if seconds is None:
            basis = "unbounded: set trial.max_runtime"
        else:
            price = trial.cost.price_per_gpu_hour
            at = f" at {price:g}/GPU-hour" if price is not None else " (no price known)"
            basis = f"{count} trials x {most} GPUs x {seconds / 3600:g} h (trial.max_runtime){at}"
        sweep = SweepPlanOut(
            trials=count,
            parallel=spec.search.parallel,
            gpus_per_trial=TrialGpusOut(min=fewest, max=most),
            peak_gpus=plan.peak_gpus,
            worst_case_gpu_hours=_rounded(plan.worst_case_gpu_hours, 3),
            worst_case_cost=_rounded(plan.worst_case_cost, 4),
            basis=basis,
            trial=f"{trial.spec.name}: each parameter at its first value"
            + (f", {most} GPUs" if "resources.gpus" in spec.parameters else ""),
        )
        return cls.from_plan(trial).model_copy(
            update={"spec": spec.model_dump(mode="json"), "sweep": sweep}
        )


def _gb(value: float) -> float:
    return round(value / GB, 3)


def _rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)
