"""Tracking rows under leases: claimed by one pass at a time, results applied
only while the lease holds, failures backed off, finished rows left alone."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from tests.factories import make_attempt, make_job, small_spec
from trainplane.db.base import utcnow
from trainplane.db.models import JobTracking
from trainplane.jobs.states import JobStatus
from trainplane.services import tracking as svc

STORAGE = "/ckpt"


def _tracked_job(session) -> str:
    job = make_job(session, status=JobStatus.RUNNING, spec=small_spec(gpus=1))
    make_attempt(session, job.id)
    with session.begin():
        svc.start_tracking(session, [job.id], utcnow())
    return job.id


def _claim(session, now=None):
    return svc.claim_tracking(
        session,
        now or utcnow(),
        lease_seconds=60,
        limit=10,
        points_per_pass=100,
        default_storage=STORAGE,
    )


def _row(session, job_id) -> JobTracking:
    session.expunge_all()
    with session.begin():
        return session.get_one(JobTracking, job_id)


def test_a_claimed_row_is_not_claimed_again_while_its_lease_holds(session):
    job_id = _tracked_job(session)
    (work,) = _claim(session)
    assert work.job_id == job_id and work.model_root == f"{STORAGE}/default/{job_id}/model"
    assert [a.number for a in work.attempts] == [1]
    assert _claim(session) == []
    assert [w.job_id for w in _claim(session, utcnow() + timedelta(seconds=61))] == [job_id]


def test_a_result_applies_only_under_the_lease_that_claimed_it(session):
    job_id = _tracked_job(session)
    (stale,) = _claim(session)
    (current,) = _claim(session, utcnow() + timedelta(seconds=61))
    assert not svc.apply_sync(
        session, stale, svc.SyncResult(run_id="r1"), utcnow(), interval_seconds=1
    )
    assert svc.apply_sync(
        session, current, svc.SyncResult(run_id="r2"), utcnow(), interval_seconds=1
    )
    assert _row(session, job_id).run_id == "r2"


def test_failures_back_off_and_a_success_clears_the_error(session):
    job_id = _tracked_job(session)
    delays = []
    for _ in range(3):
        now = utcnow()
        session.execute(update(JobTracking).values(lease_expires_at=None))
        session.commit()
        (work,) = _claim(session, now)
        svc.apply_sync(session, work, svc.SyncResult(error="down"), now, interval_seconds=1)
        row = _row(session, job_id)
        delays.append((row.lease_expires_at - now).total_seconds())
    assert delays == [2.0, 4.0, 8.0] and row.failures == 3 and row.error == "down"
    (work,) = _claim(session, utcnow() + timedelta(seconds=9))
    svc.apply_sync(
        session, work, svc.SyncResult(run_id="r", synced_metric_id=7), utcnow(), interval_seconds=1
    )
    row = _row(session, job_id)
    assert (row.error, row.failures, row.synced_metric_id) == (None, 0, 7)


def test_finished_rows_are_never_claimed(session):
    job_id = _tracked_job(session)
    (work,) = _claim(session)
    svc.apply_sync(session, work, svc.SyncResult(finished=True), utcnow(), interval_seconds=0)
    assert _row(session, job_id).finished_at is not None
    assert _claim(session, utcnow() + timedelta(days=1)) == []


def test_a_lease_is_renewed_only_by_the_pass_that_holds_it(session):
    job_id = _tracked_job(session)
    (first,) = _claim(session)
    later = utcnow() + timedelta(minutes=10)
    assert svc.renew_lease(session, first, later)
    assert _row(session, job_id).lease_expires_at == later
    (second,) = _claim(session, later + timedelta(seconds=1))  # the first pass stalled
    assert not svc.renew_lease(session, first, later + timedelta(minutes=10))
    assert svc.renew_lease(session, second, later + timedelta(minutes=10))
