"""Early stopping of a sweep's trials, judged as their progress reports arrive.

``services.progress.record_progress`` hands every report that carries metric
points to :func:`observe_report`, inside its own transaction and before it
records the report on the attempt. For a job that is not a trial that costs
one primary-key lookup. For a trial it keeps the objective's last and best
values and, at each decision step newly reached (``jobs.sweep_search``), the
value there; then the sweep's search judges it. A trial to stop gets the
answer preemption gets ("checkpoint and stop", reason ``pruned``), its attempt
is marked so that the scheduler ends its job CANCELLED with the pruner's
reason (``jobs.attempts``), and that reason is kept on the trial's row.

Judging locks the sweep's row first, so that two trials reaching a rung
together are judged one after the other, each seeing the other's value. The
sweep's row is locked before the attempt's, in the order a sweep's cancel
takes them (the sweep, then its trials' jobs and attempts).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from trainplane.db.base import utcnow
from trainplane.db.models import Job, JobAttempt, SweepTrial
from trainplane.jobs.attempts import StopReason
from trainplane.jobs.progress import MetricPoint
from trainplane.jobs.spec import load_sweep_spec
from trainplane.jobs.states import LIVE_ATTEMPT_STATUSES, JobStatus
from trainplane.jobs.sweep_search import judge
from trainplane.services.status import record_note
from trainplane.services.sweeps import trial_records

if TYPE_CHECKING:
    from trainplane.services.progress import StopRequest

_LIVE = [s.value for s in LIVE_ATTEMPT_STATUSES]
Observed = list[tuple[int, float]]  # (step, objective value), in the order reported
SWEEP_ACTOR = "sweep"  # the actor named on the event of a trial's prune


@dataclass(frozen=True)
class Objective:
    """The metric a sweep judges by, read straight from its stored spec (a
    report must not pay for validating the whole sweep)."""

    metric: str
    maximize: bool

    @classmethod
    def of(cls, sweep_spec: dict[str, Any]) -> Objective:
        objective = sweep_spec.get("objective") or {}
        return cls(metric=str(objective.get("metric")), maximize=objective.get("mode") == "max")

    def better(self, value: float, than: float | None) -> bool:
        if than is None:
            return True
        return value > than if self.maximize else value < than


def observe_report(
    session: Session, job_id: str, attempt_id: str, points: list[MetricPoint]
) -> StopRequest | None:
    """Keep what the report says of a trial's objective and judge the trial at
    each decision step it newly reached; the stop it is asked for, if pruned
    now. Nothing for a job that is not a trial, or a report without points."""
    if not points:
        return None
    found = session.execute(
        select(SweepTrial, Job.spec)
        .join(Job, Job.id == SweepTrial.sweep_id)
        .where(SweepTrial.job_id == job_id)
    ).first()
    if found is None:
        return None
    trial, sweep_spec = found
    objective = Objective.of(sweep_spec)
    observed = [
        (p.step, p.metrics[objective.metric]) for p in points if objective.metric in p.metrics
    ]
    if not observed:
        return None
    if trial.pruned_reason is None and _reached(trial, observed):
        # Judged under the sweep's lock, on the trial's row as it is now.
        session.execute(select(Job.id).where(Job.id == trial.sweep_id).with_for_update())
        trial = session.scalars(
            select(SweepTrial)
            .where(SweepTrial.job_id == job_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        ).one()
    _keep_values(trial, objective, observed)
    if trial.pruned_reason is not None or not _reached(trial, observed):
        _store_decision_values(trial, observed)
        return None
    return _judge(session, trial, sweep_spec, attempt_id, observed)


def _reached(trial: SweepTrial, observed: Observed) -> list[int]:
    """The decision steps this report reaches that hold no value yet."""
    top = max(step for step, _ in observed)
    held = trial.values or {}
    return [d for d in sorted(trial.decision_steps or []) if d <= top and str(d) not in held]


def _value_at(decision_step: int, observed: Observed) -> float:
    """The first value reported at a step at or past the decision step."""
    return next(value for step, value in observed if step >= decision_step)


def _keep_values(trial: SweepTrial, objective: Objective, observed: Observed) -> None:
    for step, value in observed:
        trial.last_value = value
        trial.last_step = step
        if objective.better(value, trial.best_value):
            trial.best_value = value


def _store_decision_values(trial: SweepTrial, observed: Observed) -> list[int]:
    """Store the value at each decision step newly reached (a new dict: the
    column sees a change); returns those steps, in order."""
    reached = _reached(trial, observed)
    if reached:
        values = dict(trial.values or {})
        values.update({str(d): _value_at(d, observed) for d in reached})
        trial.values = values
    return reached


def _judge(
    session: Session,
    trial: SweepTrial,
    sweep_spec: dict[str, Any],
    attempt_id: str,
    observed: Observed,
) -> StopRequest | None:
    spec = load_sweep_spec(sweep_spec)
    for step in _store_decision_values(trial, observed):
        session.flush()  # the records below see this trial's value at the step
        records = trial_records(session, trial.sweep_id)
        verdict = judge(spec, records, trial.number, step, trial.values[str(step)])
        trial.search_state = dict(verdict.search_state)
        if verdict.prune:
            return _prune(session, trial, attempt_id, verdict.reason, utcnow())
    return None


def _prune(
    session: Session, trial: SweepTrial, attempt_id: str, reason: str, now: datetime
) -> StopRequest | None:
    """Ask the trial's attempt to checkpoint and stop, as a preemption does;
    the scheduler then ends its job CANCELLED with ``reason``."""
    from trainplane.services.progress import StopRequest  # it hands reports here

    asked = session.execute(
        update(JobAttempt)
        .where(
            JobAttempt.id == attempt_id,
            JobAttempt.job_id == trial.job_id,
            JobAttempt.status.in_(_LIVE),
            JobAttempt.stop_reason.is_(None),
        )
        .values(stop_reason=StopReason.PRUNED.value, stop_requested_at=now)
        .execution_options(synchronize_session=False)
    )
    if asked.rowcount == 0:
        # Already being stopped (preempted, cancelled): that stop goes on, and
        # the trial is judged again at its next decision step.
        return None
    trial.pruned_reason = reason
    status = session.scalar(select(Job.status).where(Job.id == trial.job_id))
    record_note(session, trial.job_id, JobStatus(status), reason=reason, actor=SWEEP_ACTOR)
    return StopRequest(reason=StopReason.PRUNED.value, requested_at=now)
