"""Queue positions and wait reasons, including the per-process snapshot."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from tests.factories import insert_jobs, make_cluster, small_spec
from trainplane.db.base import utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import Job
from trainplane.services import queue


def views(session, ids):
    session.expunge_all()
    with read_only(session):
        jobs = list(session.scalars(select(Job).where(Job.id.in_(ids))))
        return queue.queue_views(session, jobs)


def test_positions_follow_priority_then_age(session):
    make_cluster(session, gpus=1, status="UNREACHABLE")
    base = utcnow() - timedelta(minutes=5)
    old, new = (
        insert_jobs(session, 1, spec=small_spec(gpus=1), created_at=base + timedelta(s))[0]
        for s in (0, 1)
    )
    urgent = insert_jobs(
        session, 1, spec=small_spec(gpus=1), priority=100, created_at=base + timedelta(seconds=2)
    )[0]
    shown = views(session, [old, new, urgent])
    assert [shown[i].position for i in (urgent, old, new)] == [1, 2, 3]
    assert shown[old].reason == "waiting for 1 GPU: local is unreachable"


def test_a_job_that_jumps_the_queue_refreshes_the_snapshot(session):
    make_cluster(session, gpus=1)
    first = insert_jobs(session, 1, spec=small_spec(gpus=1))[0]
    assert views(session, [first])[first].position == 1  # snapshot taken
    urgent = insert_jobs(session, 1, spec=small_spec(gpus=1), priority=100)[0]
    shown = views(session, [first, urgent])
    assert (shown[urgent].position, shown[first].position) == (1, 2)


def test_beyond_the_ranked_head_the_position_is_a_lower_bound(session, monkeypatch):
    monkeypatch.setattr(queue, "RANKED_QUEUE_LENGTH", 3)
    make_cluster(session, gpus=1)
    ids = insert_jobs(session, 5, spec=small_spec(gpus=1))
    base = utcnow()
    for offset, job_id in enumerate(ids):  # make the order explicit
        with session.begin():
            session.get_one(Job, job_id).created_at = base + timedelta(seconds=offset)
    shown = views(session, ids)
    assert [shown[i].position for i in ids[:3]] == [1, 2, 3]
    assert shown[ids[4]].position is None
    assert "more than 3 jobs ahead" in shown[ids[4]].reason
