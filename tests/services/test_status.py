"""Every (from, to) pair through the one status setter, on every backend and
for both tables (jobs, sweeps): allowed pairs change the status and write
exactly one event; the others raise and write nothing."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import select, update

from tests.factories import count_rows, make_job
from trainplane.db.models import Job, JobEvent
from trainplane.errors import InvalidTransitionError, StaleStateError
from trainplane.jobs.states import TERMINAL_STATUSES, JobStatus, transitions_for
from trainplane.services.status import set_status

PAIRS = list(itertools.product(JobStatus, JobStatus))


def make_kind(session, kind: str, status: JobStatus) -> str:
    """A job of ``kind`` in ``status``, inserted directly."""
    job_id = make_job(session, status=status).id
    if kind == "sweep":
        with session.begin():
            session.execute(update(Job).where(Job.id == job_id).values(kind="sweep"))
    return job_id


@pytest.mark.parametrize("kind", ["train", "sweep"])
@pytest.mark.parametrize(("current", "target"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_transition_pair(session, current, target, kind):
    job_id = make_kind(session, kind, current)
    allowed = target in transitions_for(kind)[current]
    if allowed:
        with session.begin():
            job = session.get_one(Job, job_id)
            event = set_status(session, job, target, reason="because", actor="tester")
        assert (event.from_status, event.to_status) == (current.value, target.value)
    else:
        with pytest.raises(InvalidTransitionError), session.begin():
            set_status(session, session.get_one(Job, job_id), target, reason="because")

    session.expunge_all()
    with session.begin():
        stored = session.get_one(Job, job_id)
        events = list(session.scalars(select(JobEvent).where(JobEvent.job_id == job_id)))
    if allowed:
        assert stored.status == target.value
        assert stored.reason == "because"
        assert len(events) == 1
        assert (events[0].from_status, events[0].to_status, events[0].actor) == (
            current.value,
            target.value,
            "tester",
        )
        assert (stored.finished_at is not None) == (target in TERMINAL_STATUSES)
        if target is JobStatus.RUNNING:
            assert stored.started_at is not None
    else:
        assert stored.status == current.value
        assert stored.reason == "test"
        assert events == []


def test_a_concurrent_change_wins_and_the_stale_writer_writes_nothing(session, sessions):
    job = make_job(session, status=JobStatus.QUEUED)
    with session.begin():
        mine = session.get_one(Job, job.id)  # read as QUEUED
        # Another writer moves the job on before we write.
        with sessions() as other, other.begin():
            other.execute(update(Job).where(Job.id == job.id).values(status="CANCELLED"))
        with pytest.raises(StaleStateError):
            set_status(session, mine, JobStatus.STARTING, reason="placed")
        session.rollback()
    assert count_rows(session) == (1, 0)


def test_event_and_status_roll_back_together(session):
    job_id = make_job(session, status=JobStatus.QUEUED).id
    with pytest.raises(RuntimeError), session.begin():
        loaded = session.get_one(Job, job_id)
        set_status(session, loaded, JobStatus.STARTING, reason="placed")
        raise RuntimeError("crash before commit")
    session.expunge_all()
    with session.begin():
        assert session.get_one(Job, job_id).status == "QUEUED"
    assert count_rows(session) == (1, 0)


def test_set_status_many_moves_only_jobs_still_in_the_expected_status(session):
    from trainplane.services.status import set_status_many

    queued = [make_job(session, status=JobStatus.QUEUED).id for _ in range(3)]
    cancelled = make_job(session, status=JobStatus.CANCELLED).id
    reasons = {job_id: f"placed {job_id}" for job_id in [*queued, cancelled]}
    with session.begin():
        moved = set_status_many(
            session, reasons, JobStatus.QUEUED, JobStatus.STARTING, actor="scheduler"
        )
    assert moved == set(queued)
    session.expunge_all()
    with session.begin():
        for job_id in queued:
            job = session.get_one(Job, job_id)
            assert (job.status, job.reason) == ("STARTING", f"placed {job_id}")
        assert session.get_one(Job, cancelled).status == "CANCELLED"
        events = list(session.scalars(select(JobEvent)))
    assert sorted(e.job_id for e in events) == sorted(queued)
    assert {(e.from_status, e.to_status, e.actor) for e in events} == {
        ("QUEUED", "STARTING", "scheduler")
    }


def test_set_status_many_refuses_a_pair_the_table_does_not_allow(session):
    from trainplane.services.status import set_status_many

    job_id = make_job(session, status=JobStatus.QUEUED).id
    with pytest.raises(InvalidTransitionError), session.begin():
        set_status_many(session, {job_id: "x"}, JobStatus.QUEUED, JobStatus.SUCCEEDED)
    assert count_rows(session) == (1, 0)


def test_set_status_many_moves_sweeps_only_by_their_table_and_only_when_told(session):
    from trainplane.services.status import set_status_many

    job = make_kind(session, "train", JobStatus.QUEUED)
    sweep = make_kind(session, "sweep", JobStatus.QUEUED)
    reasons = {job: "go", sweep: "go"}
    with session.begin():
        # QUEUED -> RUNNING is a sweep's start, never a job's.
        with pytest.raises(InvalidTransitionError):
            set_status_many(session, reasons, JobStatus.QUEUED, JobStatus.RUNNING)
        assert set_status_many(
            session, reasons, JobStatus.QUEUED, JobStatus.RUNNING, sweeps=True
        ) == {sweep}
        # QUEUED -> STARTING is placement's, never a sweep's.
        assert set_status_many(session, reasons, JobStatus.QUEUED, JobStatus.STARTING) == {job}
    session.expunge_all()
    with session.begin():
        assert session.get_one(Job, sweep).status == "RUNNING"
        assert session.get_one(Job, sweep).started_at is not None
        assert session.get_one(Job, job).status == "STARTING"
