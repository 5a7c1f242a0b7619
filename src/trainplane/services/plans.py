"""``POST /v1/jobs/plan``: what submitting a spec would do, creating nothing.

The plan runs the submit-time checks (the spec, the files it reads, whether
any cluster can ever hold it) and then asks the placement code where the job
would go if it were submitted now: behind every queued job of its priority or
higher, on the cluster state the scheduler would see.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from trainplane.db.base import utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import Job, Project
from trainplane.errors import ForbiddenError, InvalidInputError
from trainplane.jobs import placement
from trainplane.jobs.quotas import QuotaLedger
from trainplane.jobs.spec import FinetuneSpec, TrainSpec
from trainplane.jobs.states import JobStatus
from trainplane.services.access import Caller, Role
from trainplane.services.clusters import cluster_states
from trainplane.services.job_inputs import InputCheck, check_job_inputs
from trainplane.services.jobs import check_quota_can_hold, check_some_cluster_can_hold
from trainplane.services.placement import load_queue
from trainplane.services.quotas import project_quotas, project_shares

PLANNED = "planned"  # the would-be job's id in the placement code


@dataclass(frozen=True)
class PlannedPlacement:
    cluster: str | None  # where it would start now; None when it would wait
    can_start_now: bool
    queue_position: int  # 1: next in line
    reason: str


@dataclass(frozen=True)
class JobPlan:
    spec: TrainSpec | FinetuneSpec
    checks: list[InputCheck]
    placement: PlannedPlacement


def plan_job(session: Session, caller: Caller, spec: TrainSpec | FinetuneSpec) -> JobPlan:
    """Raises what submitting the spec would raise (InvalidInputError, ...)."""
    checks = check_job_inputs(spec)
    demand = placement.Demand(
        PLANNED,
        spec.resources.gpus,
        spec.resources.gpus_per_node,
        spec.resources.gpu_type,
        spec.max_runtime_seconds,
    )
    with read_only(session):
        project = session.scalar(
            select(Project.id).where(Project.name == spec.project, caller.scope(Project.id))
        )
        if project is None:
            if caller.project_ids is not None:
                raise ForbiddenError(
                    f"submitting to project '{spec.project}' needs the member role there "
                    "(or the project does not exist)"
                )
            raise InvalidInputError("project", f"no project named '{spec.project}'")
        caller.require(project, Role.MEMBER, "planning a job")
        check_some_cluster_can_hold(session, spec)
        check_quota_can_hold(session, project, spec)
        now = utcnow()
        clusters = cluster_states(session, now)
        planned = replace(demand, project_id=project)
        # Submitted now, it would queue behind every job of its priority or
        # higher (a prefix of the queue), then fair share reorders projects.
        queue = load_queue(session)
        ahead = session.scalar(
            select(func.count())
            .select_from(Job)
            .where(Job.status == JobStatus.QUEUED.value, Job.priority >= spec.priority_rank)
        )
        order = project_shares(session).order([*queue[:ahead], planned, *queue[ahead:]])
        quotas = QuotaLedger.of(project_quotas(session, now))
    position = next(i for i, d in enumerate(order) if d.job_id == PLANNED) + 1
    decisions = placement.plan(order, clusters, quotas)
    chosen = dict(decisions.placements).get(PLANNED)
    names = {c.id: c.name for c in clusters}
    if chosen is not None:
        where = PlannedPlacement(
            names[chosen], True, position, f"would start now on cluster {names[chosen]}"
        )
    else:
        held = quotas.blocks(project, demand.gpus)
        reason = held or placement.wait_reason(demand, clusters, position - 1)
        where = PlannedPlacement(None, False, position, reason)
    return JobPlan(spec=spec, checks=checks, placement=where)
