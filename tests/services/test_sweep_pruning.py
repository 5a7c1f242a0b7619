"""Pruning on a real database, through the progress endpoint's own service:
a trial's objective values kept (last, best, at each decision step), a trial
behind the others pruned at its rung with the reason stored and its attempt
asked to stop, the stop answered as preemption's is, the scheduler's look
that follows ending the job CANCELLED with that reason; a job that is not a
trial untouched; a pending trial's attempt claimed with its decision steps."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, insert, select

from tests.factories import (
    EXAMPLES,
    job_events,
    job_row,
    make_attempt,
    make_job,
    report_progress,
    small_spec,
)
from tests.sweep_rows import sweep_spec
from trainplane.db.base import utcnow
from trainplane.db.models import Job, JobAttempt, Project, SweepTrial
from trainplane.ids import new_id
from trainplane.jobs.spec import load_sweep_spec
from trainplane.jobs.states import JobStatus
from trainplane.jobs.sweep_search import decision_steps
from trainplane.services.attempts import Observed, apply_outcome, claim_attempts
from trainplane.services.sweeps import insert_trial_job

TRIAL = {
    "kind": "train",
    "entrypoint": {"function": "train:train_loop", "working_dir": str(EXAMPLES / "mlp")},
    "resources": {"gpus": 1},
}
SWEEP = sweep_spec(
    "prune",
    trial=TRIAL,
    parameters={"entrypoint.args.lr": {"values": [0.05, 0.0001, 0.00001]}},
    search={"algorithm": "grid", "trials": 3, "parallel": 3},
    early_stop={"algorithm": "asha", "min_steps": 10, "reduction_factor": 3},
)


def make_sweep(session) -> tuple[str, list[str]]:
    """A RUNNING sweep and its three trials (RUNNING, RUNNING, QUEUED)."""
    spec = load_sweep_spec(SWEEP)
    now = utcnow()
    with session.begin():
        project_id = session.scalar(select(Project.id).where(Project.name == "default"))
        sweep_id = new_id()
        session.execute(
            insert(Job),
            [
                {
                    "id": sweep_id,
                    "project_id": project_id,
                    "name": spec.name,
                    "kind": "sweep",
                    "status": "RUNNING",
                    "reason": "searching",
                    "priority": 50,
                    "gpus": 1,
                    "gpus_per_node": 1,
                    "strategy": "sweep",
                    "spec": spec.model_dump(mode="json"),
                    "spec_hash": "sweep",
                    "submitted_by": "tests",
                    "created_at": now,
                    "updated_at": now,
                }
            ],
        )
        sweep = session.get_one(Job, sweep_id)
        trials = [
            insert_trial_job(
                session,
                sweep,
                spec.trial_spec(parameters, number),
                number=number,
                parameters=parameters,
                decision_steps=decision_steps(spec),
                now=now,
            ).id
            for number, parameters in enumerate(spec.grid or [], start=1)
        ]
        for trial_id in trials[:2]:
            session.get_one(Job, trial_id).status = JobStatus.RUNNING.value
    return sweep_id, trials


def report(session, job_id: str, attempt_id: str, losses: dict[int, float]):
    """Points as a runtime sends them; returns the stop answered, if any."""
    body: dict[str, Any] = {
        "step": max(losses),
        "points": [{"step": s, "time": 1, "metrics": {"loss": v}} for s, v in losses.items()],
    }
    return report_progress(session, job_id, attempt_id, body)


def trial_row(session, job_id: str) -> SweepTrial:
    session.expunge_all()
    with session.begin():
        return session.get_one(SweepTrial, job_id)


def attempt_row(session, attempt_id: str) -> JobAttempt:
    session.expunge_all()
    with session.begin():
        return session.get_one(JobAttempt, attempt_id)


def test_a_trial_behind_at_its_rung_is_pruned_and_ends_cancelled(session):
    sweep_id, (first, second, third) = make_sweep(session)
    first_attempt = make_attempt(session, first).id
    second_attempt = make_attempt(session, second).id
    third_attempt = make_attempt(session, third, status="PENDING").id

    # Below the first rung: values kept, nothing judged.
    assert report(session, first, first_attempt, {8: 0.9, 9: 0.7}) is None
    row = trial_row(session, first)
    assert (row.last_value, row.best_value, row.last_step, row.values) == (0.7, 0.7, 9, {})
    # At rung 0 (step 10) the first trial is alone there: it goes on.
    assert report(session, first, first_attempt, {10: 0.5, 11: 0.6}) is None
    row = trial_row(session, first)
    assert (row.last_value, row.best_value, row.last_step) == (0.6, 0.5, 11)
    assert row.values == {"10": 0.5}  # the first value at or past the step
    assert row.search_state and row.pruned_reason is None
    assert attempt_row(session, first_attempt).stop_reason is None

    # The second reaches the rung worse than the first: pruned there.
    stop = report(session, second, second_attempt, {9: 2.5, 10: 2.0})
    assert stop is not None and stop.reason == "pruned"
    row = trial_row(session, second)
    assert row.values == {"10": 2.0}
    assert row.pruned_reason.startswith("pruned at rung 0 (step 10): loss 2")
    attempt = attempt_row(session, second_attempt)
    assert (attempt.stop_reason, attempt.stop_requested_at) == ("pruned", stop.requested_at)
    assert ("RUNNING", "RUNNING", row.pruned_reason) in job_events(session, second)
    # Every answer after asks again, as for a preemption; it is judged no more.
    again = report(session, second, second_attempt, {11: 0.1})
    assert again is not None and again.reason == "pruned"
    assert trial_row(session, second).pruned_reason == row.pruned_reason

    # The scheduler's next look: the attempt stopped itself (exit 75, FAILED
    # to Ray), its job ends CANCELLED with the pruner's reason, not retried.
    now = utcnow()
    works = claim_attempts(session, now, lease_seconds=60, limit=10)
    work = next(w for w in works if w.attempt_id == second_attempt)
    looked = Observed("FAILED", "exit 75", exit_code=75, logs="trainplane: pruned")
    applied = apply_outcome(
        session, work, looked, now, poll_seconds=5, starting_poll_seconds=1, lost_after_seconds=60
    )
    assert applied is not None and applied.job_status is JobStatus.CANCELLED
    job = job_row(session, second)
    assert (job.status, job.reason) == ("CANCELLED", row.pruned_reason)
    assert attempt_row(session, second_attempt).status == "STOPPED"

    # The pending trial's attempt is launched with its decision steps;
    # a running one's look needs none.
    pending = next(w for w in works if w.attempt_id == third_attempt)
    assert pending.decision_steps == tuple(decision_steps(load_sweep_spec(SWEEP)))
    assert pending.decision_steps[:2] == (10, 30)
    assert sweep_id  # the sweep itself has no attempt to claim
    assert all(w.job_id != sweep_id for w in works)


def test_a_job_that_is_not_a_trial_is_left_alone(session):
    make_sweep(session)
    job = make_job(session, status=JobStatus.RUNNING, spec=small_spec(gpus=1))
    attempt = make_attempt(session, job.id)
    before = _trial_values(session)
    assert report(session, job.id, attempt.id, {10: 5.0, 30: 9.0}) is None
    assert attempt_row(session, attempt.id).stop_reason is None
    assert _trial_values(session) == before
    now = utcnow()
    pending = make_attempt(session, job.id, number=2, status="PENDING")
    works = claim_attempts(session, now, lease_seconds=60, limit=10)
    assert next(w for w in works if w.attempt_id == pending.id).decision_steps == ()


def _trial_values(session) -> list[tuple[Any, ...]]:
    session.expunge_all()
    with session.begin():
        rows = session.execute(
            select(SweepTrial.job_id, SweepTrial.values, SweepTrial.last_value).order_by(
                SweepTrial.number
            )
        ).all()
        assert session.scalar(select(func.count()).select_from(SweepTrial)) == 3
    return [tuple(row) for row in rows]
