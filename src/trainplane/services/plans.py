"""``POST /v1/jobs/plan``: what submitting a spec would do, creating nothing.

The plan runs the submit-time checks (the spec, the files it reads, whether
any cluster can ever hold it, whether its memory estimate fits some GPU) and
then asks the placement code where the job would go if it were submitted
now: behind every queued job of its priority or higher, on the cluster state
the scheduler would see. It adds the memory estimate per GPU and the strategy
(``auto`` resolved), when the job would start, and what it would cost.

A sweep is planned as its largest trial (the most GPUs it sweeps), plus what
the whole search asks for: trials, how many at once, the peak GPUs and the
worst-case GPU-hours and cost when its trials have a max_runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainplane.db.base import utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import Cluster
from trainplane.errors import InvalidInputError
from trainplane.jobs import placement
from trainplane.jobs.entrypoints import wanted_secrets
from trainplane.jobs.memory import GB
from trainplane.jobs.quotas import QuotaLedger
from trainplane.jobs.service_queues import QueuedJob, ServiceRules
from trainplane.jobs.spec import FinetuneSpec, SweepSpec, TrainSpec
from trainplane.services.access import Caller, Role
from trainplane.services.bundles import check_spec_code
from trainplane.services.clusters import cluster_states
from trainplane.services.estimates import StrategyPlan, plan_strategy
from trainplane.services.file_access import FileAccess, check_spec_locations
from trainplane.services.forecasts import (
    DurationForecast,
    StartForecast,
    expected_duration,
    expected_releases,
    expected_start,
)
from trainplane.services.job_inputs import InputCheck, check_job_inputs
from trainplane.services.jobs import check_quota_can_hold, check_some_cluster_can_hold
from trainplane.services.names import check_names
from trainplane.services.placement import ranked_queue
from trainplane.services.projects import project_for
from trainplane.services.quotas import project_quotas
from trainplane.services.secrets import check_secret_refs
from trainplane.services.storage_access import check_checkpoint_storage
from trainplane.services.sweep_submit import trial_fields

PLANNED = "planned"  # the would-be job's id in the placement code


@dataclass(frozen=True)
class PlannedPlacement:
    cluster: str | None  # where it would start now; None when it would wait
    can_start_now: bool
    queue_position: int  # 1: next in line
    reason: str
    expected_start: StartForecast | None = None


@dataclass(frozen=True)
class CostForecast:
    price_per_gpu_hour: float | None  # of the cluster it would run on
    cluster: str | None
    duration: DurationForecast
    max_runtime_seconds: int | None

    def cost(self, gpus: int, seconds: float | None) -> float | None:
        if seconds is None or self.price_per_gpu_hour is None:
            return None
        return seconds * gpus / 3600 * self.price_per_gpu_hour


@dataclass(frozen=True)
class JobPlan:
    spec: TrainSpec | FinetuneSpec
    checks: list[InputCheck]
    placement: PlannedPlacement
    strategy: StrategyPlan
    cost: CostForecast


@dataclass(frozen=True)
class SweepPlan:
    spec: SweepSpec
    trial: JobPlan  # of its largest trial
    gpus_per_trial: tuple[int, int]  # fewest, most

    @property
    def peak_gpus(self) -> int:
        return self.spec.search.parallel * self.gpus_per_trial[1]

    @property
    def worst_case_gpu_hours(self) -> float | None:
        """Every trial on the most GPUs for its whole max_runtime."""
        seconds = self.trial.cost.max_runtime_seconds
        if seconds is None:
            return None
        return self.spec.trial_count * self.gpus_per_trial[1] * seconds / 3600

    @property
    def worst_case_cost(self) -> float | None:
        hours, price = self.worst_case_gpu_hours, self.trial.cost.price_per_gpu_hour
        return None if hours is None or price is None else hours * price


def plan_job(
    session: Session,
    caller: Caller,
    spec: TrainSpec | FinetuneSpec | SweepSpec,
    *,
    access: FileAccess,
    rules: ServiceRules | None = None,
) -> JobPlan | SweepPlan:
    """Raises what submitting the spec would raise (InvalidInputError, ...).
    ``rules``: the scheduler's, which rank the queue (their defaults when None)."""
    if isinstance(spec, SweepSpec):
        return plan_sweep(session, caller, spec, access=access, rules=rules)
    ref = project_for(session, caller, spec.project, Role.MEMBER, "planning a job")
    check_spec_locations(spec, ref, access)
    inputs = check_job_inputs(spec)
    check_checkpoint_storage(spec, access.project_root(ref))
    project = ref.id
    demand = placement.Demand(
        PLANNED,
        spec.resources.gpus,
        spec.resources.gpus_per_node,
        spec.resources.gpu_type,
        spec.max_runtime_seconds,
    )
    with read_only(session):
        document = spec.model_dump(mode="json")
        check_names(session, ref.id, ref.name, document, claim=False)
        check_secret_refs(session, ref.id, ref.name, wanted_secrets(spec))
        check_spec_code(session, spec)
        check_some_cluster_can_hold(session, spec)
        check_quota_can_hold(session, project, spec)
        now = utcnow()
        clusters = cluster_states(session, now)
        strategy = plan_strategy(spec, inputs.model_config, clusters)
        if strategy.refusal is not None:
            raise InvalidInputError(*strategy.refusal)
        if strategy.estimate is not None:
            demand = replace(demand, gpu_memory_gb=strategy.estimate.total / GB)
        releases = expected_releases(session, now)
        duration = expected_duration(session, spec, project)
        prices = dict(session.execute(select(Cluster.id, Cluster.price_per_gpu_hour)).all())
        planned = replace(demand, project_id=project)
        # Submitted now, it has had no service and has waited for nothing:
        # ranked with the queue as the scheduler would rank it.
        submitted = QueuedJob(planned, spec.priority_rank, submitted=0.0)
        ranked = ranked_queue(session, now, rules or ServiceRules(), clusters, extra=[submitted])
        order = ranked.order
        quotas = QuotaLedger.of(project_quotas(session, now))
    position = next(i for i, d in enumerate(order) if d.job_id == PLANNED) + 1
    decisions = placement.plan(order, clusters, quotas, pinned=ranked.pinned)
    chosen = dict(decisions.placements).get(PLANNED)
    names = {c.id: c.name for c in clusters}
    if chosen is not None:
        where = PlannedPlacement(
            names[chosen],
            True,
            position,
            f"would start now on cluster {names[chosen]}",
            StartForecast(0.0, f"it would start now on cluster {names[chosen]}"),
        )
    else:
        held = quotas.blocks(project, demand.gpus)
        reason = held or placement.wait_reason(demand, clusters, position - 1)
        start = (
            StartForecast(None, "unknown: it waits for its project's quota")
            if held
            else expected_start(demand, order[: position - 1], clusters, releases)
        )
        where = PlannedPlacement(None, False, position, reason, start)
    runs_on = chosen or _cheapest_holder(demand, clusters, prices)
    cost = CostForecast(
        price_per_gpu_hour=prices.get(runs_on) if runs_on else None,
        cluster=names.get(runs_on) if runs_on else None,
        duration=duration,
        max_runtime_seconds=spec.max_runtime_seconds,
    )
    return JobPlan(spec=spec, checks=inputs.checks, placement=where, strategy=strategy, cost=cost)


def _cheapest_holder(
    demand: placement.Demand, clusters: list[placement.ClusterState], prices: dict[str, float]
) -> str | None:
    holders = [c for c in clusters if placement.can_ever_hold(c, demand)]
    if not holders:
        return None
    return min(holders, key=lambda c: (prices.get(c.id) or 0.0, c.name)).id


def plan_sweep(
    session: Session,
    caller: Caller,
    spec: SweepSpec,
    *,
    access: FileAccess,
    rules: ServiceRules | None = None,
) -> SweepPlan:
    """The checks of the sweep's largest trial, with the fields it names in
    the sweep's spec (``trial.dataset.train``, ``parameters.<path>``)."""
    with trial_fields(spec):
        trial = plan_job(session, caller, largest_trial(spec), access=access, rules=rules)
    assert isinstance(trial, JobPlan)
    return SweepPlan(spec=spec, trial=trial, gpus_per_trial=spec.trial_gpus())


def largest_trial(spec: SweepSpec) -> TrainSpec | FinetuneSpec:
    """Trial 1 with each parameter at its first value, and the most GPUs when
    the sweep searches resources.gpus (it validated at parse)."""
    parameters = {path: parameter.points[0] for path, parameter in spec.parameters.items()}
    if "resources.gpus" in parameters:
        parameters["resources.gpus"] = spec.max_trial_gpus()
    return spec.trial_spec(parameters, 1)
