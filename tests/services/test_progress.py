"""Progress and checkpoint reads are scoped by project like every job read, and
points keep the number of the attempt that reported them."""

from __future__ import annotations

import pytest

from tests.factories import make_attempt, make_job, make_project, report_progress, small_spec
from trainplane.errors import NotFoundError
from trainplane.jobs.states import JobStatus
from trainplane.services import checkpoints, jobs, progress
from trainplane.services.access import Caller


def test_points_keep_their_attempt_and_progress_follows_the_latest(session):
    job = make_job(session, status=JobStatus.RUNNING, spec=small_spec(gpus=1))
    first = make_attempt(session, job.id, number=1)
    report_progress(
        session, job.id, first.id, {"step": 40, "points": [{"step": 40, "time": 1, "metrics": {}}]}
    )
    second = make_attempt(session, job.id, number=2, status="PENDING")
    page = progress.job_metrics(session, Caller.local_admin(), job.id, limit=10, after=None)
    assert page.progress is None  # the latest attempt has not reported yet

    report_progress(
        session,
        job.id,
        second.id,
        {
            "step": 3,
            "total_steps": 90,
            "points": [{"step": 3, "time": 2, "metrics": {"loss": 2.5}}],
        },
    )
    page = progress.job_metrics(session, Caller.local_admin(), job.id, limit=10, after=None)
    assert [(p.attempt, p.step) for p in page.points] == [(1, 40), (2, 3)]
    assert (page.progress.attempt, page.progress.step, page.progress.total_steps) == (2, 3, 90)


def test_reads_of_another_projects_job_are_not_found(session, settings):
    # Plain values: a refused read rolls back, which expires ORM rows.
    other_id = make_project(session, "other").id
    job_id = make_job(session, project_id=other_id, spec=small_spec(gpus=1)).id
    storage = settings.resolved_checkpoint_storage
    outsider = Caller(subject="someone", project_ids=frozenset({"0" * 26}))
    with pytest.raises(NotFoundError):
        progress.job_metrics(session, outsider, job_id, limit=10, after=None)
    with pytest.raises(NotFoundError):
        checkpoints.list_checkpoints(session, outsider, job_id, default_storage=storage)
    member = Caller(subject="member", project_ids=frozenset({other_id}))
    assert progress.job_metrics(session, member, job_id, limit=10, after=None).points == []
    listing = checkpoints.list_checkpoints(session, member, job_id, default_storage=storage)
    assert listing.storage == f"{storage}/other/{job_id}/checkpoints"


def test_each_metric_keeps_its_last_value_over_reports_and_attempts(session):
    job = make_job(session, status=JobStatus.RUNNING, spec=small_spec(gpus=1))
    first = make_attempt(session, job.id, number=1)

    def point(step, **metrics):
        return {"step": step, "time": step, "metrics": metrics}

    report_progress(session, job.id, first.id, {"points": [point(1, loss=3.0), point(2, loss=2.0)]})
    report_progress(session, job.id, first.id, {"points": [point(3, eval_loss=2.5)]})
    second = make_attempt(session, job.id, number=2)
    report_progress(session, job.id, second.id, {"points": [point(3, loss=1.5)]})
    report_progress(session, job.id, second.id, {"step": 4, "points": []})  # a heartbeat
    detail = jobs.get_job(session, Caller.local_admin(), job.id)
    by_number = {row.attempt.number: row.attempt.latest_metrics for row in detail.attempts}
    assert by_number == {1: {"loss": 2.0, "eval_loss": 2.5}, 2: {"loss": 1.5}}
    # The later attempt wins; what only the earlier one reported is kept.
    assert detail.latest_metrics == {"loss": 1.5, "eval_loss": 2.5}
