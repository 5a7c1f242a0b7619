"""One restart budget, on a real database: restarts Ray Train made in place
(reported by the runtime with the attempt's token) and failed attempts spend
``retries.max_restarts`` together; preemptions and attempts lost before they
ran spend none. Outcomes are what the scheduler's slow phase reports."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from tests.factories import job_attempts, job_events, job_row, report_progress, small_spec
from tests.services.test_scheduling import _apply, _claim_one, _placed_job
from trainplane.db.base import utcnow
from trainplane.db.models import JobAttempt
from trainplane.jobs.attempts import StopReason
from trainplane.scheduler.launch import restarts_left
from trainplane.services import attempts as svc
from trainplane.services.placement import place_queued_jobs


def _running(session, max_restarts):
    spec = small_spec(retries={"max_restarts": max_restarts, "backoff_seconds": 0})
    job_id = _placed_job(session, spec=spec)
    _apply(session, _claim_one(session), svc.Launched(new=True))
    _apply(session, _claim_one(session), svc.Observed("RUNNING"))
    return job_id


def _restarted_in_place(session, job_id, *numbers, kind="worker_group"):
    attempt = job_attempts(session, job_id)[-1]
    restarts = [{"kind": kind, "number": n, "error": "rank 1 failed: exit code 3"} for n in numbers]
    report_progress(session, job_id, attempt.id, {"restarts": restarts})


def _fails(session):
    _apply(session, _claim_one(session), svc.Observed("FAILED", exit_code=1, logs="x\n"))


def _next_attempt(session, job_id):
    """Back in the queue after its backoff, placed again: the new attempt's claim."""
    svc.requeue_restarts(session, utcnow() + timedelta(seconds=1))
    assert [j for j, _ in place_queued_jobs(session, utcnow()).placed] == [job_id]
    return _claim_one(session)


def test_a_restart_in_place_spends_the_budget_and_the_reason_counts_it(session):
    job_id = _running(session, max_restarts=1)
    _restarted_in_place(session, job_id, 1)
    _restarted_in_place(session, job_id, 1)  # sent again: it counts once
    (attempt,) = job_attempts(session, job_id)
    assert attempt.in_place_restarts == 1
    notes = [reason for _, _, reason in job_events(session, job_id) if "in place" in reason]
    assert notes == ["worker group restarted in place (restart 1 of 1): rank 1 failed: exit code 3"]
    _fails(session)
    job = job_row(session, job_id)
    assert job.status == "FAILED" and job.reason.endswith("(after 1 restart)"), job.reason
    assert len(job_attempts(session, job_id)) == 1  # no second attempt


def test_placement_retries_spend_the_budget_and_the_next_attempt_gets_the_rest(session):
    job_id = _running(session, max_restarts=2)
    _restarted_in_place(session, job_id, 1, kind="placement")
    assert "placement retried in place (restart 1 of 2)" in job_events(session, job_id)[-1][2]
    _fails(session)
    job = job_row(session, job_id)
    assert job.status == "RESTARTING" and "restart 2 of 2" in job.reason, job.reason
    work = _next_attempt(session, job_id)
    assert work.restarts_used == 2
    assert restarts_left(work.spec, work.restarts_used) == 0  # TRAINPLANE_RESTARTS_LEFT


def test_the_combined_budget_stops_retrying(session):
    job_id = _running(session, max_restarts=3)
    _restarted_in_place(session, job_id, 1, 2)  # two in one report, numbered
    _fails(session)  # restart 3 of 3
    assert "restart 3 of 3" in job_row(session, job_id).reason
    work = _next_attempt(session, job_id)
    assert restarts_left(work.spec, work.restarts_used) == 0
    _apply(session, work, svc.Launched(new=True))
    _apply(session, _claim_one(session), svc.Observed("RUNNING"))
    _fails(session)
    job = job_row(session, job_id)
    assert job.status == "FAILED" and job.reason.endswith("(after 3 restarts)"), job.reason


def test_an_attempt_lost_before_it_ran_spends_none_and_one_lost_after_spends_one(session):
    spec = small_spec(retries={"max_restarts": 1, "backoff_seconds": 0})
    job_id = _placed_job(session, spec=spec)
    _apply(session, _claim_one(session), svc.Launched(new=True))
    _apply(session, _claim_one(session), svc.Observed(None))  # the cluster forgot it
    work = _next_attempt(session, job_id)
    assert work.restarts_used == 0
    _apply(session, work, svc.Launched(new=True))
    _apply(session, _claim_one(session), svc.Observed("RUNNING"))
    _apply(session, _claim_one(session), svc.Observed(None))  # its Ray head restarted
    assert "restart 1 of 1" in job_row(session, job_id).reason
    assert _next_attempt(session, job_id).restarts_used == 1


def test_a_preemption_spends_none_but_restarts_in_place_before_it_count(session):
    job_id = _running(session, max_restarts=2)
    _restarted_in_place(session, job_id, 1)
    with session.begin():
        session.execute(update(JobAttempt).values(stop_reason=StopReason.PREEMPTED))
    _apply(session, _claim_one(session), svc.Observed("STOPPED", logs="x\n"))
    assert job_row(session, job_id).status == "QUEUED"
    assert job_attempts(session, job_id)[0].status == "STOPPED"
    assert [j for j, _ in place_queued_jobs(session, utcnow()).placed] == [job_id]
    assert _claim_one(session).restarts_used == 1  # the restart in place, not the preemption


def test_a_preempted_attempt_whose_cluster_forgets_it_spends_none(session):
    job_id = _running(session, max_restarts=1)
    with session.begin():
        session.execute(update(JobAttempt).values(stop_reason=StopReason.PREEMPTED))
    _apply(session, _claim_one(session), svc.Observed(None))  # its Ray head restarted
    assert job_attempts(session, job_id)[0].status == "LOST"
    assert job_row(session, job_id).status == "QUEUED"
    assert [j for j, _ in place_queued_jobs(session, utcnow()).placed] == [job_id]
    assert _claim_one(session).restarts_used == 0


def test_a_ray_job_that_fails_before_it_runs_spends_the_budget(session):
    """A runtime_env that cannot be set up fails the Ray job before the
    driver runs: no exit code, never seen RUNNING. It still uses a restart,
    so the job ends instead of restarting forever."""
    spec = small_spec(retries={"max_restarts": 1, "backoff_seconds": 0})
    job_id = _placed_job(session, spec=spec)
    _apply(session, _claim_one(session), svc.Launched(new=True))
    _apply(session, _claim_one(session), svc.Observed("FAILED", logs="runtime_env setup failed\n"))
    assert "restart 1 of 1" in job_row(session, job_id).reason
    work = _next_attempt(session, job_id)
    _apply(session, work, svc.Launched(new=True))
    _apply(session, _claim_one(session), svc.Observed("FAILED", logs="runtime_env setup failed\n"))
    job = job_row(session, job_id)
    assert job.status == "FAILED" and job.reason.endswith("(after 1 restart)"), job.reason
    assert len(job_attempts(session, job_id)) == 2
