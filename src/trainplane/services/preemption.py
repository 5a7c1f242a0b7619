"""Preemption passes: a waiting high-priority job asks low-priority attempts
to make room, and a queued job that has had less GPU time asks jobs that
have had more (attained service), when they checkpoint
(``trainplane.jobs.preemption`` chooses which).

Asking is all a pass does, under the placement lock and in one transaction:
each victim attempt gets ``stop_reason = preempted``, when it was asked and
for whom, and both jobs get an event naming the other. The victim's runtime
learns it from its next progress report, checkpoints and stops by itself;
whatever is still running when the grace period is over is stopped by the
scheduler (``trainplane.scheduler.steps``). When the attempt has ended the
job goes back to the queue, without using a restart, and resumes from its
latest checkpoint (``trainplane.services.attempts``). Meanwhile the
preemptor is offered GPUs before any other job (``services.placement``), so
the GPUs it freed cannot go to someone else.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from trainplane.db.locks import placement_section, try_placement_lock
from trainplane.db.models import Job, JobAttempt, Project
from trainplane.jobs.attempts import StopReason
from trainplane.jobs.durations import format_duration
from trainplane.jobs.preemption import (
    PREEMPTOR_PRIORITY,
    Preemption,
    RunningAttempt,
    choose_preemptions,
    choose_service_preemptions,
)
from trainplane.jobs.quotas import QuotaLedger
from trainplane.jobs.service_queues import (
    HeldJob,
    ServiceRules,
    shield_top_share,
    standing,
    starved,
)
from trainplane.jobs.spec import Priority
from trainplane.jobs.states import LIVE_ATTEMPT_STATUSES, AttemptStatus, JobStatus
from trainplane.services.clusters import cluster_states
from trainplane.services.placement import load_queue, ranked_queue
from trainplane.services.quotas import project_quotas
from trainplane.services.run_time import run_seconds
from trainplane.services.status import SCHEDULER_ACTOR, record_note

_LIVE = [s.value for s in LIVE_ATTEMPT_STATUSES]


@dataclass(frozen=True)
class Asked:
    """One preemption asked for: ``victim_job`` stops for ``preemptor_job``."""

    preemptor_job: str
    victim_job: str
    victim_attempt: str
    cluster: str


def priority_name(value: int) -> str:
    return next((p.name for p in Priority if p.value == value), str(value))


def preempt_for_waiting_jobs(
    session: Session,
    now: datetime,
    *,
    grace_seconds: float,
    min_runtime_seconds: float,
    priorities: bool = True,
    rules: ServiceRules | None = None,
) -> list[Asked]:
    """``priorities``: high jobs may stop low ones; ``rules`` with
    ``preempt``: jobs may stop jobs of more attained service that checkpoint."""
    with placement_section(), session.begin():
        if not try_placement_lock(session):
            return []
        choices: list[Preemption] = []
        waiting = load_queue(session, min_priority=PREEMPTOR_PRIORITY) if priorities else []
        clusters = cluster_states(session, now)
        running = _running_attempts(session, now)
        if waiting:
            choices = choose_preemptions(
                waiting,
                clusters,
                running,
                min_runtime_seconds=min_runtime_seconds,
                quotas=QuotaLedger.of(project_quotas(session, now)),
            )
        if rules is not None and rules.preempt:
            choices += _service_choices(session, now, rules, clusters, running, choices)
        if not choices:
            return []
        names = {c.id: c.name for c in clusters}
        jobs = _job_facts(
            session,
            {c.preemptor.job_id for c in choices} | {v.job_id for c in choices for v in c.victims},
        )
        asked: list[Asked] = []
        for choice in choices:
            cluster = names.get(choice.cluster_id, choice.cluster_id)
            preemptor = choice.preemptor.job_id
            for victim in choice.victims:
                marked = session.execute(
                    update(JobAttempt)
                    .where(
                        JobAttempt.id == victim.attempt_id,
                        JobAttempt.status.in_(_LIVE),
                        JobAttempt.stop_reason.is_(None),
                    )
                    .values(
                        stop_reason=StopReason.PREEMPTED,
                        stop_requested_at=now,
                        preempted_by=preemptor,
                    )
                    .execution_options(synchronize_session=False)
                ).rowcount
                if marked != 1:
                    continue  # it ended or is being looked at; the next pass decides again
                record_note(
                    session,
                    victim.job_id,
                    JobStatus.RUNNING,
                    reason=(
                        f"preemption: job {preemptor} ({jobs[preemptor]}) needs "
                        f"{choice.preemptor.gpus} GPUs on cluster {cluster}; asked to "
                        f"checkpoint and stop within {format_duration(int(grace_seconds))}"
                    ),
                    actor=SCHEDULER_ACTOR,
                )
                record_note(
                    session,
                    preemptor,
                    JobStatus.QUEUED,
                    reason=(
                        f"preempting job {victim.job_id} ({jobs[victim.job_id]}, "
                        f"{victim.gpus} GPUs on cluster {cluster}) to start"
                    ),
                    actor=SCHEDULER_ACTOR,
                )
                asked.append(Asked(preemptor, victim.job_id, victim.attempt_id, cluster))
        return asked


def _service_choices(
    session: Session,
    now: datetime,
    rules: ServiceRules,
    clusters: list,
    running: list[RunningAttempt],
    already: list[Preemption],
) -> list[Preemption]:
    """Attained-service preemptions, after the priority ones (whose victims
    count as stopping already)."""
    stopping = {v.attempt_id: c.preemptor.job_id for c in already for v in c.victims}
    running = [
        replace(a, preempted_by=stopping[a.attempt_id]) if a.attempt_id in stopping else a
        for a in running
    ]
    taken = {c.preemptor.job_id for c in already}
    ranked = ranked_queue(session, now, rules, clusters)
    waiting = [d for d in ranked.order if d.job_id not in taken]
    if not waiting:
        return []
    return choose_service_preemptions(
        waiting,
        ranked.standing,
        clusters,
        running,
        shield_top_share(
            [
                HeldJob(
                    job_id=a.job_id,
                    gpus=a.gpus,
                    submitted=a.submitted,
                    attained_gpu_seconds=a.attained_gpu_seconds,
                    standing=standing(
                        a.priority,
                        a.attained_gpu_seconds,
                        rules,
                        submitted=a.submitted,
                        starved=starved(
                            a.gpus,
                            a.attained_gpu_seconds,
                            a.waited_seconds,
                            rules,
                            ranked.wait_bound_seconds,
                        ),
                        entry_level=a.entry_level,
                    ),
                    entry_level=a.entry_level,
                )
                for a in running
            ],
            rules,
            sum(c.gpus for c in clusters if c.ready),
        ),
        min_runtime_seconds=rules.min_run_seconds,
        loss_tolerance_seconds=rules.loss_tolerance_seconds,
        quotas=QuotaLedger.of(project_quotas(session, now)),
    )


def _checkpoints(spec: dict) -> bool:
    """Whether a job's spec saves checkpoints on a schedule, so that a
    preemption loses little (the others would start over)."""
    checkpoint = spec.get("checkpoint") or {}
    return bool(checkpoint.get("every_steps") or checkpoint.get("every_minutes"))


def _running_attempts(session: Session, now: datetime) -> list[RunningAttempt]:
    """Live attempts of running jobs that a preemption could concern, with
    the service each job has had."""
    rows = session.execute(
        select(
            JobAttempt.id,
            JobAttempt.job_id,
            JobAttempt.cluster_id,
            JobAttempt.started_at,
            JobAttempt.stop_reason,
            JobAttempt.preempted_by,
            Job.gpus,
            Job.priority,
            Job.spec,
            Job.created_at,
            Job.entry_level,
        )
        .join(Job, Job.id == JobAttempt.job_id)
        .where(
            JobAttempt.status == AttemptStatus.RUNNING.value,
            JobAttempt.cluster_id.is_not(None),
            Job.status == JobStatus.RUNNING.value,
        )
    ).all()
    ran = run_seconds(session, {row.job_id for row in rows}, now)
    attempts = []
    for row in rows:
        if row.stop_reason is not None and row.stop_reason != StopReason.PREEMPTED:
            continue  # being stopped for another reason (cancel, max_runtime)
        started = row.started_at or now
        attempts.append(
            RunningAttempt(
                attempt_id=row.id,
                job_id=row.job_id,
                cluster_id=row.cluster_id,
                gpus=row.gpus,
                priority=row.priority,
                running_seconds=max(0.0, (now - started).total_seconds()),
                preempted_by=row.preempted_by,
                attained_gpu_seconds=ran.get(row.job_id, 0.0) * row.gpus,
                waited_seconds=max(
                    0.0, (now - row.created_at).total_seconds() - ran.get(row.job_id, 0.0)
                ),
                checkpoints=_checkpoints(row.spec or {}),
                submitted=(row.created_at - now).total_seconds(),
                entry_level=row.entry_level or 0,
            )
        )
    return attempts


def _job_facts(session: Session, job_ids: set[str]) -> dict[str, str]:
    """'high priority, project vision' for each job, for the events."""
    rows = session.execute(
        select(Job.id, Job.priority, Project.name)
        .join(Project, Project.id == Job.project_id)
        .where(Job.id.in_(job_ids))
    )
    return {r.id: f"{priority_name(r.priority)} priority, project {r.name}" for r in rows}


def preemptor_name(session: Session, job_id: str | None) -> str:
    """'job X (high priority, project vision)' for a victim's requeue reason."""
    if job_id is None:
        return "a higher-priority job"
    facts = _job_facts(session, {job_id})
    return f"job {job_id} ({facts[job_id]})" if job_id in facts else f"job {job_id}"
