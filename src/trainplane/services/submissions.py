"""What every submission shares, a job's and a sweep's: the spec's
fingerprint, Idempotency-Key replays, the strategy plan, the checks that
refuse a job no cluster or quota could ever run, and the INSERT of a new job
row in its one transaction."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from trainplane import wakeup
from trainplane.db.engine import read_only
from trainplane.db.models import Job, Project
from trainplane.errors import ConflictError, InvalidInputError
from trainplane.jobs.memory import GB
from trainplane.jobs.placement import Demand, never_fits_reason
from trainplane.jobs.spec import FinetuneSpec, TrainSpec
from trainplane.jobs.states import JobStatus
from trainplane.services.access import Caller
from trainplane.services.clusters import cluster_capacity, recent_capacity
from trainplane.services.estimates import StrategyPlan, plan_strategy

QUEUED_REASON = "waiting for the scheduler"


def spec_fingerprint(document: dict) -> str:
    """A hash of the validated spec: equal specs hash equal whatever their key order."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Submission:
    job: Job
    created: bool  # False when an Idempotency-Key replayed an earlier submission


def memory_needed(strategy: StrategyPlan | None) -> float | None:
    """GB per GPU by the estimate of the strategy that will run, for placement."""
    if strategy is None or strategy.estimate is None:
        return None
    return round(strategy.estimate.total / GB, 3)


# Columns a new job is inserted with; the rest stay NULL until it runs.
_INSERTED_COLUMNS = tuple(
    c.key
    for c in Job.__table__.columns
    if c.key not in ("started_at", "finished_at", "next_attempt_at")
)


def new_job(
    spec: TrainSpec | FinetuneSpec,
    document: dict[str, Any],
    strategy: StrategyPlan | None,
    *,
    fingerprint: str,
    job_id: str,
    project_id: str,
    submitted_by: str,
    idempotency_key: str | None,
    folder: str | None,
    now: datetime,
    parent_id: str | None = None,
) -> Job:
    """A new QUEUED job of ``spec``, not yet inserted. ``document``: the spec
    as stored (strategy auto resolved); ``fingerprint``: of the spec as sent;
    ``strategy``: its plan, if one was made."""
    return Job(
        id=job_id,
        project_id=project_id,
        name=spec.name,
        kind=spec.kind,
        status=JobStatus.QUEUED.value,
        reason=QUEUED_REASON,
        priority=spec.priority_rank,
        gpus=spec.resources.gpus,
        gpus_per_node=spec.resources.gpus_per_node,
        gpu_type=spec.resources.gpu_type,
        max_runtime_seconds=spec.max_runtime_seconds,
        gpu_memory_gb=memory_needed(strategy),
        strategy=document["strategy"]["type"],
        strategy_reason=strategy.reason if strategy and spec.strategy.type == "auto" else "",
        spec=document,
        spec_hash=fingerprint,
        submitted_by=submitted_by,
        idempotency_key=idempotency_key,
        created_at=now,
        updated_at=now,
        folder=folder,
        parent_id=parent_id,
    )


def insert_job(session: Session, job: Job) -> None:
    """A plain INSERT of a new (transient) job, cheaper than the unit of work;
    ``job`` stays detached, with its project set for the caller to read."""
    session.execute(insert(Job), [{key: getattr(job, key) for key in _INSERTED_COLUMNS}])


def strategy_for(
    session: Session, spec: TrainSpec | FinetuneSpec, model_config: dict[str, Any] | None
) -> StrategyPlan | None:
    """The strategy plan of a job whose spec says enough to estimate its
    memory, or asks for auto; None for the rest (most jobs: no extra work)."""
    if spec.strategy.type != "auto" and spec.model is None and model_config is None:
        return None
    with read_only(session):
        # Fresh, not the cached view: a job may be refused on it.
        clusters = cluster_capacity(session)
    return plan_strategy(spec, model_config, clusters)


def commit_submission(
    session: Session, caller: Caller, job: Job, write: Callable[[], None]
) -> Submission:
    """Insert ``job`` by ``write`` (its checks, the INSERT and its event) in one
    transaction, one connection: the hot path of the whole API. A job's
    Idempotency-Key replays the caller's earlier submission instead."""
    key = job.idempotency_key
    try:
        with session.begin():
            if key is not None:
                earlier = replay(session, caller, key, job.spec_hash)
                if earlier is not None:
                    return Submission(earlier, created=False)
            write()
    except IntegrityError:
        if key is None:
            raise
        # Another request with the same key won the race; answer as it did.
        with read_only(session):
            earlier = replay(session, caller, key, job.spec_hash)
        if earlier is None:
            raise
        return Submission(earlier, created=False)
    wakeup.work_available()
    return Submission(job, created=True)


def check_some_cluster_can_hold(session: Session, spec: TrainSpec | FinetuneSpec) -> None:
    """A job no registered cluster could ever run is refused now, with the
    numbers, rather than queued forever. With no cluster registered yet, jobs
    wait for one."""
    resources = spec.resources
    demand = Demand("new", resources.gpus, resources.gpus_per_node, resources.gpu_type)
    if never_fits_reason(demand, recent_capacity(session)) is None:
        return
    clusters = cluster_capacity(session)  # never refuse on a cached view
    reason = never_fits_reason(demand, clusters)
    if reason is None:
        return
    typed = [
        c
        for c in clusters
        if not demand.gpu_type or c.accelerator.lower() == demand.gpu_type.lower()
    ]
    field = (
        "resources.gpu_type"
        if not typed
        else (
            "resources.gpus_per_node"
            if demand.gpus_per_node and all(demand.gpus <= c.gpus for c in typed)
            else "resources.gpus"
        )
    )
    raise InvalidInputError(field, reason)


def check_quota_can_hold(session: Session, project_id: str, spec: TrainSpec | FinetuneSpec) -> None:
    """A job bigger than its project's GPU limit could never start: refused now."""
    quota = session.execute(
        select(Project.name, Project.max_gpus).where(Project.id == project_id)
    ).one()
    if quota.max_gpus is not None and spec.resources.gpus > quota.max_gpus:
        raise InvalidInputError(
            "resources.gpus",
            f"project {quota.name} may use at most {quota.max_gpus} GPUs at once (quota); "
            f"this job asks for {spec.resources.gpus}",
        )


def replay(session: Session, caller: Caller, key: str, fingerprint: str) -> Job | None:
    """The caller's earlier job submitted with Idempotency-Key ``key``, if any;
    ConflictError when its spec differs from this one."""
    earlier = session.scalar(
        select(Job).where(Job.submitted_by == caller.subject, Job.idempotency_key == key)
    )
    if earlier is None:
        return None
    if earlier.spec_hash != fingerprint:
        raise ConflictError(
            f"Idempotency-Key '{key}' was already used for job {earlier.id} with a "
            "different spec; use a new key for a new job"
        )
    return earlier
