"""Preemption on a real database: asking victims to stop, the events, the
requeue that uses no restart, and the preemptor's first claim on the freed
GPUs. (The cluster side is in tests/runtime/test_training.py, on real Ray.)"""

from __future__ import annotations

from datetime import timedelta

from tests.factories import (
    insert_jobs,
    job_attempts,
    job_events,
    job_row,
    make_cluster,
    make_project,
    small_spec,
)
from trainplane.db.base import utcnow
from trainplane.db.models import Job
from trainplane.jobs.states import JobStatus
from trainplane.services import attempts as svc
from trainplane.services.placement import place_queued_jobs
from trainplane.services.preemption import preempt_for_waiting_jobs
from trainplane.services.status import set_status

LOW, NORMAL, HIGH = 0, 50, 100
GRACE = 60.0


def _preempt(session, *, now=None, min_runtime=0.0):
    return preempt_for_waiting_jobs(
        session, now or utcnow(), grace_seconds=GRACE, min_runtime_seconds=min_runtime
    )


def _place(session, *, now=None):
    return place_queued_jobs(session, now or utcnow(), preemption_grace_seconds=GRACE)


def _running_low_job(session, *, gpus=2, project_id="0" * 26, retries=None):
    """A low-priority job placed on the cluster and running."""
    spec = small_spec("low", gpus=gpus, retries=retries or {"max_restarts": 0})
    (job_id,) = insert_jobs(session, 1, spec=spec, priority=LOW, project_id=project_id)
    assert [j for j, _ in place_queued_jobs(session, utcnow()).placed] == [job_id]
    work = _claim(session, job_id)
    _apply(session, work, svc.Launched(new=True))
    _apply(session, _claim(session, job_id), svc.Observed("RUNNING"))
    assert job_row(session, job_id).status == JobStatus.RUNNING.value
    return job_id


def _claim(session, job_id):
    works = svc.claim_attempts(session, utcnow() + timedelta(hours=1), lease_seconds=30, limit=50)
    mine = [w for w in works if w.job_id == job_id]
    assert mine, f"no live attempt of {job_id} to claim"
    return mine[0]


def _apply(session, work, outcome):
    return svc.apply_outcome(
        session,
        work,
        outcome,
        utcnow(),
        poll_seconds=0,
        starting_poll_seconds=0,
        lost_after_seconds=60,
    )


def _cancel(session, job_id):
    session.expunge_all()
    with session.begin():
        job = session.get_one(Job, job_id)
        live = job.status == JobStatus.RUNNING.value
        target = JobStatus.CANCELLING if live else JobStatus.CANCELLED
        set_status(session, job, target, reason="cancelled by a test")


def test_a_waiting_high_job_asks_a_low_one_to_stop_and_both_histories_say_so(session):
    make_cluster(session, gpus=2)
    low = _running_low_job(session)
    (high,) = insert_jobs(session, 1, spec=small_spec("high", gpus=2), priority=HIGH)

    asked = _preempt(session)

    assert [(a.preemptor_job, a.victim_job, a.cluster) for a in asked] == [(high, low, "local")]
    (attempt,) = job_attempts(session, low)
    assert (attempt.stop_reason, attempt.preempted_by) == ("preempted", high)
    assert attempt.stop_requested_at is not None
    assert attempt.status == "RUNNING"  # it checkpoints and stops by itself
    assert job_events(session, low)[-1] == (
        "RUNNING",
        "RUNNING",
        f"preemption: job {high} (high priority, project default) needs 2 GPUs on cluster "
        "local; asked to checkpoint and stop within 1m",
    )
    assert job_events(session, high)[-1] == (
        "QUEUED",
        "QUEUED",
        f"preempting job {low} (low priority, project default, 2 GPUs on cluster local) to start",
    )
    # Asked once: the next passes count the stopping attempt toward the job.
    assert _preempt(session) == []
    assert _preempt(session) == []


def test_normal_jobs_and_young_attempts_are_not_preempted(session):
    make_cluster(session, gpus=2)
    low = _running_low_job(session)
    insert_jobs(session, 1, spec=small_spec("normal", gpus=2), priority=NORMAL)
    assert _preempt(session) == []  # only high jobs preempt
    insert_jobs(session, 1, spec=small_spec("high", gpus=2), priority=HIGH)
    assert _preempt(session, min_runtime=3600) == []  # it started just now
    assert job_attempts(session, low)[0].stop_reason is None


def test_a_preempted_attempt_that_ends_requeues_its_job_without_using_a_restart(session):
    make_cluster(session, gpus=2)
    low = _running_low_job(session, retries={"max_restarts": 0})
    (high,) = insert_jobs(session, 1, spec=small_spec("high", gpus=2), priority=HIGH)
    _preempt(session)

    # The runtime checkpointed and left with its preemption exit code.
    work = _claim(session, low)
    assert work.stop_reason == "preempted" and work.stop_requested_at is not None
    applied = _apply(session, work, svc.Observed("FAILED", exit_code=75, logs="saved\n"))

    assert applied.job_status is JobStatus.QUEUED
    job = job_row(session, low)
    assert job.status == JobStatus.QUEUED.value  # not FAILED, though it has no restarts
    expected = f"preempted by job {high} (high priority, project default)"
    assert job.reason == f"{expected}; back in the queue, resumes from its latest checkpoint"
    (attempt,) = job_attempts(session, low)
    assert (attempt.status, attempt.reason) == ("STOPPED", expected)

    # The freed GPUs go to the preemptor; the victim waits behind it.
    placed = [j for j, _ in _place(session).placed]
    assert placed == [high]
    assert job_row(session, low).status == JobStatus.QUEUED.value


def test_the_next_attempt_after_a_preemption_uses_no_restart_and_resumes(session):
    make_cluster(session, gpus=2)
    low = _running_low_job(session, retries={"max_restarts": 1})
    (high,) = insert_jobs(session, 1, spec=small_spec("high", gpus=2), priority=HIGH)
    _preempt(session)
    _apply(session, _claim(session, low), svc.Observed("STOPPED"))
    _cancel(session, high)  # out of the way, so the victim runs again at once
    assert [j for j, _ in _place(session).placed] == [low]

    work = _claim(session, low)
    assert work.number == 2 and work.status.value == "PENDING"
    assert (work.restarts_used, work.after_preemption) == (0, True)


def test_a_preempted_run_that_finished_anyway_succeeds(session):
    make_cluster(session, gpus=2)
    low = _running_low_job(session)
    insert_jobs(session, 1, spec=small_spec("high", gpus=2), priority=HIGH)
    _preempt(session)
    _apply(session, _claim(session, low), svc.Observed("SUCCEEDED", exit_code=0))
    assert job_row(session, low).status == JobStatus.SUCCEEDED.value


def test_a_cancel_during_the_grace_period_cancels(session):
    make_cluster(session, gpus=2)
    low = _running_low_job(session)
    insert_jobs(session, 1, spec=small_spec("high", gpus=2), priority=HIGH)
    _preempt(session)
    _cancel(session, low)
    _apply(session, _claim(session, low), svc.Observed("STOPPED"))
    assert job_row(session, low).status == JobStatus.CANCELLED.value


def _competing_projects(session):
    """Project a's low job runs on cluster local, project b's normal job on
    cluster other; a's next job has waited longest. Once a's low job stops, a
    has no GPUs in use and b has 2: fair share alone would give local to a."""
    make_cluster(session, "local", gpus=2)
    a = make_project(session, "a")
    b = make_project(session, "b")
    low = _running_low_job(session, project_id=a.id)
    make_cluster(session, "other", gpus=2)
    (busy,) = insert_jobs(session, 1, spec=small_spec("b-busy", gpus=2), project_id=b.id)
    assert [j for j, _ in place_queued_jobs(session, utcnow()).placed] == [busy]
    early = utcnow() - timedelta(minutes=5)
    (waiting_a,) = insert_jobs(
        session, 1, spec=small_spec("a-next", gpus=2), project_id=a.id, created_at=early
    )
    (high,) = insert_jobs(session, 1, spec=small_spec("b-high", gpus=2), priority=HIGH,
                          project_id=b.id)  # fmt: skip
    assert [(p.victim_job, p.cluster) for p in _preempt(session)] == [(low, "local")]
    _apply(session, _claim(session, low), svc.Observed("STOPPED"))
    return high, waiting_a


def test_freed_gpus_go_to_the_preemptor_before_fair_share_would_give_them_away(session):
    high, waiting_a = _competing_projects(session)
    assert [j for j, _ in _place(session).placed] == [high]
    assert job_row(session, waiting_a).status == JobStatus.QUEUED.value


def test_the_preemptors_claim_on_freed_gpus_lapses_after_the_grace_period(session):
    high, waiting_a = _competing_projects(session)
    later = utcnow() + timedelta(seconds=GRACE + 300)
    assert [j for j, _ in _place(session, now=later).placed] == [waiting_a]
    # Without the claim, fair share decides: the same pass as without preemption.
    assert job_row(session, high).status == JobStatus.QUEUED.value
