"""The sweeps' controller: each scheduler pass moves every live sweep along.

A sweep (a job of kind ``sweep``) is never placed; its trials are ordinary
jobs. Each sweep is advanced under its row lock (``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, so two schedulers never advance one sweep at once, and a sweep a
cancel or a pruning verdict holds is left for the next pass; SQLite runs one
scheduler per database), in one transaction of its own: a QUEUED sweep starts
searching; a RUNNING one gets new trials while fewer than ``search.parallel``
are live and fewer than ``search.trials`` exist, and ends once every trial has;
a CANCELLING one cancels what is left of its trials and ends CANCELLED once
they have ended.

The database is the only truth: the search is rebuilt from the trial rows on
every pass, each proposal is inserted in the transaction that holds the lock,
and the next trial's number is the count of those already there. A server
killed at any point loses no trial and, restarted, creates none twice (the
unique ``(sweep_id, number)`` is the last guard).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from trainplane import wakeup
from trainplane.db.engine import read_only
from trainplane.db.models import Job
from trainplane.errors import StaleStateError
from trainplane.jobs import sweep_search
from trainplane.jobs.spec import SpecError, load_sweep_spec, spec_errors
from trainplane.jobs.states import TERMINAL_STATUSES, JobStatus
from trainplane.jobs.sweep_search import TrialRecord
from trainplane.jobs.sweep_spec import SweepSpec
from trainplane.services.status import SCHEDULER_ACTOR, set_status
from trainplane.services.sweep_registration import registration_pending
from trainplane.services.sweeps import insert_trial_job, stop_trials, trial_records
from trainplane.services.tracking import start_tracking

log = logging.getLogger(__name__)

S = JobStatus
SWEEP_KIND = "sweep"
_ADVANCED = [S.QUEUED.value, S.RUNNING.value, S.CANCELLING.value]
_TERMINAL = {s.value for s in TERMINAL_STATUSES}


@dataclass
class _Pass:
    """What one sweep's transaction changed, and what it may count on."""

    # Whether this server's tracking loop registers models (tracking enabled):
    # only then does a sweep with register_model wait for its best trial's.
    tracking: bool = True
    notes: list[str] = field(default_factory=list)
    created: int = 0  # trials inserted (placement has new work)


def advance_sweeps(session: Session, now: datetime, *, tracking: bool = True) -> list[str]:
    """Advance every sweep in QUEUED, RUNNING or CANCELLING, each in its own
    transaction; returns what changed, for the log. ``tracking``: whether the
    server tracks jobs in MLflow (and so registers models)."""
    with read_only(session):
        ids = list(
            session.scalars(
                select(Job.id)
                .where(Job.kind == SWEEP_KIND, Job.status.in_(_ADVANCED))
                .order_by(Job.created_at, Job.id)
            )
        )
    notes: list[str] = []
    created = 0
    for sweep_id in ids:
        try:
            with session.begin():
                sweep = session.scalar(
                    select(Job)
                    .where(Job.id == sweep_id, Job.status.in_(_ADVANCED))
                    .with_for_update(skip_locked=True)
                    .execution_options(populate_existing=True)
                )
                if sweep is None:
                    continue  # another scheduler holds it, or it ended meanwhile
                done = _advance(session, sweep, now, _Pass(tracking=tracking))
        except (StaleStateError, IntegrityError) as exc:
            # A trial or the sweep changed under us, or (without the lock, which
            # should never happen) a trial number was taken: nothing was
            # written; the next pass looks again.
            notes.append(f"sweep {sweep_id}: {type(exc).__name__}; looking again next pass")
            continue
        except Exception:
            # One sweep's trouble must not stop the others, nor the placement
            # that runs after this in the scheduler's pass.
            log.exception("advancing sweep %s failed", sweep_id, extra={"job_id": sweep_id})
            continue
        notes.extend(done.notes)
        created += done.created
    if created:
        wakeup.work_available()  # new trials to place
    return notes


def _advance(session: Session, sweep: Job, now: datetime, done: _Pass) -> _Pass:
    status = S(sweep.status)
    if status is S.CANCELLING:
        _cancel(session, sweep, done)
        return done
    try:
        spec = load_sweep_spec(sweep.spec)
    except SpecError as exc:
        _fail(session, sweep, f"the sweep's spec no longer parses: {exc}", done)
        return done
    if status is S.QUEUED:
        search = spec.search
        reason = f"searching: {spec.planned_trials} trials, {search.parallel} at once"
        _move(session, sweep, S.RUNNING, reason, done)
        # The sweep's MLflow parent run, opened by the tracking loop.
        start_tracking(session, [sweep.id], now)
    _search(session, sweep, spec, now, done)
    return done


def _search(session: Session, sweep: Job, spec: SweepSpec, now: datetime, done: _Pass) -> None:
    records = list(trial_records(session, sweep.id))
    total = spec.planned_trials
    live = sum(1 for r in records if r.state == "running")
    steps = sweep_search.decision_steps(spec)
    exhausted = False
    while live < spec.search.parallel and len(records) < total:
        number = len(records) + 1
        parameters = sweep_search.propose(spec, records, number)
        if parameters is None:
            exhausted = True  # the grid has no combination left
            break
        try:
            trial = spec.trial_spec(parameters, number)
        except (ValidationError, SpecError) as exc:
            # Every combination was validated at submit: this is a bug, and
            # the sweep cannot go on without skipping part of its space.
            fault = spec_errors(exc) if isinstance(exc, ValidationError) else str(exc)
            _fail(
                session,
                sweep,
                f"trial {number}'s parameters {_shown(parameters)} make an invalid spec: {fault}",
                done,
            )
            return
        job = insert_trial_job(
            session,
            sweep,
            trial,
            number=number,
            parameters=parameters,
            decision_steps=steps,
            now=now,
        )
        # A trial no cluster can hold fails at once (services.sweeps).
        ended = job.status in _TERMINAL
        records.append(
            TrialRecord(
                number=number, parameters=parameters, state="failed" if ended else "running"
            )
        )
        live += 0 if ended else 1
        done.created += 1
        done.notes.append(f"sweep {sweep.id}: trial {number} {_shown(parameters)}")
    if live == 0 and (len(records) >= total or exhausted):
        _complete(session, sweep, spec, records, done, now)
        return
    progress = f"searching: {len(records)} of {total} trials created, {live} running"
    _set_reason(session, sweep, progress, now)


def _complete(
    session: Session,
    sweep: Job,
    spec: SweepSpec,
    records: list[TrialRecord],
    done: _Pass,
    now: datetime,
) -> None:
    tally = sweep_search.counts(records)
    summary = (
        f"{len(records)} trial{'' if len(records) == 1 else 's'}: "
        f"{tally['succeeded']} succeeded, {tally['pruned']} pruned, {tally['failed']} failed"
    )
    metric = spec.objective.metric
    winner = sweep_search.best(spec, records)
    if winner is None or winner.value is None:
        _move(session, sweep, S.FAILED, f"{summary}; no trial reported {metric}", done)
        return
    best = f"best {sweep.name}-{winner.number}: {metric} {winner.value:.4g}"
    waiting, unregistered = registration_pending(session, sweep.id, spec, tracking=done.tracking)
    if waiting:
        # SUCCEEDED promises the model: a client that waited for it finds it
        # registered. The tracking loop registers it once the trials ended.
        wanted = spec.register_model.name if spec.register_model else ""
        reason = f"{summary}; {best}; registering its model as {wanted}"
        _set_reason(session, sweep, reason, now)
        return
    note = f"; its model was not registered: {unregistered}" if unregistered else ""
    _move(session, sweep, S.SUCCEEDED, f"{summary}; {best}{note}", done)


def _cancel(session: Session, sweep: Job, done: _Pass) -> None:
    """CANCELLING: stop what is left of the trials (again, should a trial have
    been queued back or restarted since the cancel); CANCELLED once every one
    has ended."""
    if stop_trials(session, sweep, actor=SCHEDULER_ACTOR):
        return
    statuses = session.scalars(select(Job.status).where(Job.parent_id == sweep.id))
    ended = Counter(status.lower() for status in statuses)
    what = ", ".join(f"{n} {status}" for status, n in sorted(ended.items())) or "none created"
    _move(session, sweep, S.CANCELLED, f"cancelled; its trials ended: {what}", done)


def _fail(session: Session, sweep: Job, reason: str, done: _Pass) -> None:
    """The sweep FAILED; its live trials are cancelled (nobody would read
    them)."""
    stop_trials(session, sweep, actor=SCHEDULER_ACTOR)
    _move(session, sweep, S.FAILED, reason, done)


def _move(session: Session, sweep: Job, target: JobStatus, reason: str, done: _Pass) -> None:
    set_status(session, sweep, target, reason=reason, actor=SCHEDULER_ACTOR)
    done.notes.append(f"sweep {sweep.id} -> {target}: {reason}")


def _set_reason(session: Session, sweep: Job, reason: str, now: datetime) -> None:
    """The sweep's progress shown as its reason: no status change, no event."""
    if sweep.reason == reason:
        return
    session.execute(
        update(Job)
        .where(Job.id == sweep.id, Job.status == sweep.status)
        .values(reason=reason, updated_at=now)
        .execution_options(synchronize_session=False)
    )


def _shown(parameters: dict[str, Any]) -> str:
    return ", ".join(f"{path}={value!r}" for path, value in parameters.items())
