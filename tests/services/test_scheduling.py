"""Placement passes, leases and the application of cluster outcomes, on a real
database (no cluster: outcomes are what the scheduler's slow phase reports)."""

from __future__ import annotations

import re
import threading
from datetime import timedelta

import pytest
from sqlalchemy import select

from tests.factories import insert_jobs, job_attempts, job_events, job_row, make_cluster, small_spec
from trainplane.db.base import utcnow
from trainplane.db.models import JobAttempt, JobTracking
from trainplane.jobs.attempts import StopReason
from trainplane.jobs.states import JobStatus
from trainplane.services import attempts as svc
from trainplane.services.placement import place_queued_jobs

POLL = 1.0
LOST_AFTER = 60.0


def _claim_one(session):
    (work,) = svc.claim_attempts(session, utcnow(), lease_seconds=30, limit=10)
    return work


def _apply(session, work, outcome, *, now=None, lost_after=LOST_AFTER):
    return svc.apply_outcome(
        session,
        work,
        outcome,
        now or utcnow(),
        poll_seconds=0,
        starting_poll_seconds=0,
        lost_after_seconds=lost_after,
    )


def _placed_job(session, *, spec=None, gpus=2):
    make_cluster(session, gpus=2)
    (job_id,) = insert_jobs(session, 1, spec=spec or small_spec(gpus=gpus))
    result = place_queued_jobs(session, utcnow())
    assert [j for j, _ in result.placed] == [job_id]
    return job_id


# --- placement -------------------------------------------------------------------


def test_a_pass_places_what_fits_in_queue_order(session):
    make_cluster(session, gpus=2)
    low = insert_jobs(session, 1, spec=small_spec("low"), priority=0)
    first, second = insert_jobs(session, 2, spec=small_spec("normal"))
    high = insert_jobs(session, 1, spec=small_spec("high"), priority=100)

    result = place_queued_jobs(session, utcnow())

    assert [job_id for job_id, _ in result.placed] == high
    assert job_row(session, high[0]).status == "STARTING"
    for waiting in (first, second, low[0]):
        assert job_row(session, waiting).status == "QUEUED"
    (attempt,) = job_attempts(session, high[0])
    assert (attempt.number, attempt.status) == (1, "PENDING")
    assert job_events(session, high[0])[-1][:2] == ("QUEUED", "STARTING")


def test_nothing_is_placed_on_unready_clusters(session):
    make_cluster(session, gpus=2, status="UNREACHABLE")
    insert_jobs(session, 1, spec=small_spec())
    assert place_queued_jobs(session, utcnow()).placed == []


def test_live_attempts_hold_their_gpus(session):
    make_cluster(session, gpus=2)
    insert_jobs(session, 2, spec=small_spec())
    assert len(place_queued_jobs(session, utcnow()).placed) == 1
    assert place_queued_jobs(session, utcnow()).placed == []


# --- claims and leases -----------------------------------------------------------


def test_a_claimed_attempt_is_not_claimed_again_until_its_lease_ends(session):
    _placed_job(session)
    now = utcnow()
    assert len(svc.claim_attempts(session, now, lease_seconds=30, limit=10)) == 1
    assert svc.claim_attempts(session, now, lease_seconds=30, limit=10) == []
    later = now + timedelta(seconds=31)
    assert len(svc.claim_attempts(session, later, lease_seconds=30, limit=10)) == 1


def test_a_result_is_dropped_when_the_lease_moved_on(session):
    job_id = _placed_job(session)
    stale = _claim_one(session)
    # The lease expires and another scheduler takes the attempt over.
    svc.claim_attempts(session, utcnow() + timedelta(seconds=31), lease_seconds=30, limit=10)
    assert _apply(session, stale, svc.Observed("RUNNING")) is None
    assert job_row(session, job_id).status == "STARTING"


@pytest.mark.postgres_only
def test_concurrent_claims_take_disjoint_batches(session, sessions):
    make_cluster(session, gpus=100)
    insert_jobs(session, 40, spec=small_spec(gpus=1))
    assert len(place_queued_jobs(session, utcnow()).placed) == 40
    claimed: list[list[str]] = []
    barrier = threading.Barrier(4)

    def claim():
        with sessions() as own:
            barrier.wait()
            works = svc.claim_attempts(own, utcnow(), lease_seconds=30, limit=15)
            claimed.append([w.attempt_id for w in works])

    threads = [threading.Thread(target=claim) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [a for batch in claimed for a in batch]
    assert len(everything) == len(set(everything)) == 40


# --- outcomes ----------------------------------------------------------------------


def test_launch_then_running_then_success(session):
    job_id = _placed_job(session)
    _apply(session, _claim_one(session), svc.Launched(new=True))
    assert job_attempts(session, job_id)[0].status == "SUBMITTED"
    _apply(session, _claim_one(session), svc.Observed("RUNNING"))
    job = job_row(session, job_id)
    assert job.status == "RUNNING" and job.started_at is not None
    assert "CPU workers with gloo" in job.reason
    _apply(session, _claim_one(session), svc.Observed("SUCCEEDED", exit_code=0, logs="ok\n"))
    job = job_row(session, job_id)
    assert job.status == "SUCCEEDED" and job.finished_at is not None
    (attempt,) = job_attempts(session, job_id)
    assert (attempt.status, attempt.exit_code, attempt.log_tail) == ("SUCCEEDED", 0, "ok\n")
    assert [e[1] for e in job_events(session, job_id)] == ["STARTING", "RUNNING", "SUCCEEDED"]


def test_a_repeated_launch_is_recorded_not_repeated(session):
    job_id = _placed_job(session)
    applied = _apply(session, _claim_one(session), svc.Launched(new=False))
    assert "already existed" in applied.notes[0]
    assert job_attempts(session, job_id)[0].status == "SUBMITTED"


def test_failure_without_restarts_fails_with_exit_code_and_log_tail(session):
    job_id = _placed_job(session)
    _apply(session, _claim_one(session), svc.Launched(new=True))
    _apply(session, _claim_one(session), svc.Observed("RUNNING"))
    logs = "line one\n[rank 0] Traceback: boom\ntrainplane: workers finished with exit code 3\n"
    _apply(session, _claim_one(session), svc.Observed("FAILED", exit_code=3, logs=logs))
    job = job_row(session, job_id)
    assert job.status == "FAILED"
    assert job.reason.startswith("exit code 3 on cluster local: [rank 0] Traceback: boom")
    last_event = job_events(session, job_id)[-1]
    assert last_event[1] == "FAILED"


def test_failure_with_restarts_left_restarts_after_backoff(session):
    spec = small_spec(retries={"max_restarts": 1, "backoff_seconds": 10})
    job_id = _placed_job(session, spec=spec)
    _apply(session, _claim_one(session), svc.Launched(new=True))
    _apply(session, _claim_one(session), svc.Observed("RUNNING"))
    _apply(session, _claim_one(session), svc.Observed("FAILED", exit_code=3, logs="x\n"))
    job = job_row(session, job_id)
    assert job.status == "RESTARTING"
    assert "restart 1 of 1 in 10s" in job.reason
    assert svc.requeue_restarts(session, utcnow()) == 0  # backoff not over
    assert svc.requeue_restarts(session, utcnow() + timedelta(seconds=11)) == 1
    assert job_row(session, job_id).status == "QUEUED"

    # The second attempt fails too: the budget is spent.
    place_queued_jobs(session, utcnow())
    _apply(session, _claim_one(session), svc.Launched(new=True))
    _apply(session, _claim_one(session), svc.Observed("RUNNING"))
    _apply(session, _claim_one(session), svc.Observed("FAILED", exit_code=3, logs="x\n"))
    job = job_row(session, job_id)
    assert job.status == "FAILED" and "after 1 restart" in job.reason
    assert [a.number for a in job_attempts(session, job_id)] == [1, 2]
    transitions = [e[1] for e in job_events(session, job_id)]
    assert transitions == [
        "STARTING",
        "RUNNING",
        "RESTARTING",
        "QUEUED",
        "STARTING",
        "RUNNING",
        "FAILED",
    ]


def test_a_job_gets_one_tracking_row_however_often_it_is_placed(session):
    spec = small_spec(retries={"max_restarts": 1, "backoff_seconds": 0})
    job_id = _placed_job(session, spec=spec)
    _apply(session, _claim_one(session), svc.Launched(new=True))
    _apply(session, _claim_one(session), svc.Observed("RUNNING"))
    _apply(session, _claim_one(session), svc.Observed("FAILED", exit_code=3, logs="x\n"))
    svc.requeue_restarts(session, utcnow() + timedelta(seconds=1))
    assert [j for j, _ in place_queued_jobs(session, utcnow()).placed] == [job_id]
    with session.begin():
        rows = session.scalars(select(JobTracking).where(JobTracking.job_id == job_id)).all()
    assert len(rows) == 1 and rows[0].run_id is None and rows[0].finished_at is None


def test_a_silent_cluster_loses_the_attempt_only_after_the_timeout(session):
    job_id = _placed_job(session, spec=small_spec(retries={"max_restarts": 0}))
    _apply(session, _claim_one(session), svc.Launched(new=True))
    _apply(session, _claim_one(session), svc.Observed("RUNNING"))
    now = utcnow()
    _apply(session, _claim_one(session), svc.Unreachable("refused"), now=now)
    assert job_row(session, job_id).status == "RUNNING"
    later = now + timedelta(seconds=LOST_AFTER + 1)
    work = svc.claim_attempts(session, later, lease_seconds=30, limit=10)[0]
    _apply(session, work, svc.Unreachable("refused"), now=later)
    job = job_row(session, job_id)
    assert job.status == "FAILED"
    assert "stopped answering for 1m" in job.reason
    assert job_attempts(session, job_id)[0].status == "LOST"


def test_an_attempt_lost_before_it_ran_goes_back_to_the_queue(session):
    job_id = _placed_job(session)
    _apply(session, _claim_one(session), svc.Launched(new=True))
    _apply(session, _claim_one(session), svc.Observed(None))  # the cluster forgot it
    job = job_row(session, job_id)
    assert job.status == "QUEUED" and "back in the queue" in job.reason


def test_cancel_of_a_pending_attempt_needs_no_cluster(session, api):
    job_id = _placed_job(session)
    assert api.post(f"/v1/jobs/{job_id}/cancel").json()["status"] == "CANCELLING"
    work = _claim_one(session)
    assert work.job_status is JobStatus.CANCELLING
    _apply(session, work, svc.Observed(None, stop_reason="cancelled"))
    assert job_row(session, job_id).status == "CANCELLED"
    assert job_attempts(session, job_id)[0].status == "STOPPED"


def test_cancel_of_a_running_attempt_ends_when_ray_says_stopped(session, api):
    job_id = _placed_job(session)
    _apply(session, _claim_one(session), svc.Launched(new=True))
    _apply(session, _claim_one(session), svc.Observed("RUNNING"))
    api.post(f"/v1/jobs/{job_id}/cancel")
    _apply(session, _claim_one(session), svc.Observed("RUNNING", stop_reason="cancelled"))
    assert job_row(session, job_id).status == "CANCELLING"
    _apply(session, _claim_one(session), svc.Observed("STOPPED", stop_reason="cancelled"))
    assert job_row(session, job_id).status == "CANCELLED"


def test_max_runtime_stop_fails_the_job(session):
    job_id = _placed_job(session, spec=small_spec(max_runtime="1m"))
    _apply(session, _claim_one(session), svc.Launched(new=True))
    _apply(session, _claim_one(session), svc.Observed("RUNNING"))
    _apply(session, _claim_one(session), svc.Observed("RUNNING", stop_reason="max_runtime"))
    assert job_row(session, job_id).status == "RUNNING"
    _apply(session, _claim_one(session), svc.Observed("STOPPED"))
    job = job_row(session, job_id)
    assert job.status == "FAILED" and "exceeded max_runtime 1m" in job.reason


def test_a_rejected_launch_fails_the_job_with_the_reason(session):
    job_id = _placed_job(session)
    _apply(session, _claim_one(session), svc.Rejected("runtime_env is invalid"))
    job = job_row(session, job_id)
    assert job.status == "FAILED" and "refused the job: runtime_env is invalid" in job.reason


def test_attempts_on_their_way_up_are_looked_at_more_often(session):
    job_id = _placed_job(session)
    now = utcnow()

    def next_look(outcome):
        svc.apply_outcome(
            session,
            _claim_one(session),
            outcome,
            now,
            poll_seconds=5,
            starting_poll_seconds=0.25,
            lost_after_seconds=60,
        )
        return (job_attempts(session, job_id)[0].lease_expires_at - now).total_seconds()

    assert next_look(svc.Launched(new=True)) == pytest.approx(0.25)
    # Claims need the attempt due: move the clock by re-dating it.
    with session.begin():
        session.query(JobAttempt).update({"lease_expires_at": None})
    assert next_look(svc.Observed("RUNNING")) == pytest.approx(5)


# --- stuck attempts -------------------------------------------------------------------


def _running_with_progress(session, spec, *, step, silent_for):
    job_id = _placed_job(session, spec=spec)
    _apply(session, _claim_one(session), svc.Launched(new=True))
    _apply(session, _claim_one(session), svc.Observed("RUNNING"))
    with session.begin():
        session.query(JobAttempt).update(
            {"progress_step": step, "last_progress_at": utcnow() - silent_for}
        )
    return job_id


def test_a_claim_carries_what_stuck_detection_and_launch_need(session):
    spec = small_spec(stuck_after="90s")
    job_id = _running_with_progress(session, spec, step=40, silent_for=timedelta(seconds=5))
    work = _claim_one(session)
    assert (work.job_id, work.project_name) == (job_id, "default")
    assert (work.progress_step, work.stuck_after_seconds) == (40, 90)
    assert work.last_progress_at is not None


def test_a_stuck_stop_is_a_failure_that_restarts_while_restarts_remain(session):
    spec = small_spec(retries={"max_restarts": 1, "backoff_seconds": 0})
    job_id = _running_with_progress(session, spec, step=40, silent_for=timedelta(minutes=2))
    _apply(session, _claim_one(session), svc.Observed("RUNNING", stop_reason=StopReason.STUCK))
    assert job_row(session, job_id).status == "RUNNING"  # until Ray confirms the stop
    _apply(session, _claim_one(session), svc.Observed("STOPPED", logs="step 40\n"))
    job = job_row(session, job_id)
    assert job.status == "RESTARTING"
    # Seconds pass between the test's clock and the scheduler's.
    assert re.match(
        r"stuck: no progress for 2m(\d+s)? \(last step 40\); restart 1 of 1", job.reason
    )
    (attempt,) = job_attempts(session, job_id)
    assert (attempt.status, attempt.stop_reason) == ("FAILED", "stuck")


def test_a_stuck_stop_without_restarts_left_fails_the_job(session):
    spec = small_spec(retries={"max_restarts": 0})
    job_id = _running_with_progress(session, spec, step=7, silent_for=timedelta(seconds=45))
    _apply(session, _claim_one(session), svc.Observed("RUNNING", stop_reason=StopReason.STUCK))
    # However Ray words the end of a stopped job, it is the stuck failure.
    _apply(session, _claim_one(session), svc.Observed("FAILED", exit_code=-15, logs="x\n"))
    job = job_row(session, job_id)
    assert job.status == "FAILED"
    assert re.fullmatch(r"stuck: no progress for 4[5-9]s \(last step 7\)", job.reason)
