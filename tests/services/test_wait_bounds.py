"""The wait bound on a real database: each queued job's first-come-first-served
wait estimated once from the work ahead of it (sizes learned from the
project's jobs that succeeded), the bound read from a high quantile of them
in the window, and a job past it promoted ahead of fair share with the
reservation pinned to it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, update

from tests.factories import (
    aged_job,
    insert_jobs,
    make_cluster,
    make_project,
    ran_for,
    small_spec,
)
from trainplane.db.base import utcnow
from trainplane.db.models import Job
from trainplane.jobs.service_queues import HOUR, ServiceRules
from trainplane.jobs.states import JobStatus
from trainplane.services.placement import place_queued_jobs
from trainplane.services.queue import queue_views
from trainplane.services.wait_bounds import estimate_fifo_waits, learned_sizes, wait_bound

RULES = ServiceRules()


def _estimated(session, job_ids):
    with session.begin():
        rows = session.execute(select(Job.id, Job.fifo_wait_seconds).where(Job.id.in_(job_ids)))
        return dict(rows.all())


def _estimate(session, rules=RULES, now=None):
    with session.begin():
        return estimate_fifo_waits(session, now or utcnow(), rules)


@pytest.fixture
def busy(session):
    """A 4-GPU cluster; project a ran a 2-GPU job for 2 h that succeeded (4
    GPU-hours learned) and runs another for 1 h now; queued: a's 4-GPU gang
    (submitted 5 h ago), then project b's 4-GPU and 2-GPU jobs (b has no
    finished job: the overall size, 4 GPU-hours, stands for it)."""
    cluster = make_cluster(session, "local", gpus=4)
    a, b = make_project(session, "a"), make_project(session, "b")
    done = aged_job(
        session, "done", 2, project=a, ago=timedelta(hours=9), status=JobStatus.SUCCEEDED
    )
    ran_for(session, done, hours=2)
    with session.begin():
        session.execute(update(Job).where(Job.id == done).values(finished_at=utcnow()))
    running = aged_job(
        session, "running", 2, project=a, ago=timedelta(hours=6), status=JobStatus.RUNNING
    )
    ran_for(session, running, hours=1, cluster=cluster.id, live=True)
    gang = aged_job(session, "gang", 4, project=a, ago=timedelta(hours=5))
    rival = aged_job(session, "rival", 4, project=b, ago=timedelta(minutes=2))
    small = aged_job(session, "small", 2, project=b, ago=timedelta(minutes=1))
    return gang, rival, small


def test_each_queued_job_is_estimated_once_from_the_work_ahead_of_it(session, busy):
    gang, rival, small = busy
    with session.begin():
        sizes = learned_sizes(session, utcnow(), RULES)
    assert sizes.overall == pytest.approx(4 * HOUR, rel=1e-3)
    assert _estimate(session) == 3
    waits = _estimated(session, [gang, rival, small])
    # Ahead of the gang: the running job's 2 GPU-hours left, over 4 GPUs.
    assert waits[gang] == pytest.approx(2 * HOUR / 4, rel=1e-3)
    # Ahead of the rival: that, and the gang's 4 GPU-hours.
    assert waits[rival] == pytest.approx(6 * HOUR / 4, rel=1e-3)
    assert waits[small] == pytest.approx(10 * HOUR / 4, rel=1e-3)
    # Kept as first estimated: a later pass estimates nothing again.
    assert _estimate(session, now=utcnow() + timedelta(hours=1)) == 0
    assert _estimated(session, [gang]) == {gang: waits[gang]}


def test_a_declared_max_runtime_is_not_taken_for_the_work_a_job_will_hold(session, busy):
    c = make_project(session, "c")
    roomy = aged_job(session, "roomy", 1, project=c, ago=timedelta(seconds=30), max_runtime="10h")
    tight = aged_job(session, "tight", 1, project=c, ago=timedelta(seconds=20), max_runtime="30m")
    after = aged_job(session, "after", 1, project=c)
    _estimate(session)
    waits = _estimated(session, [roomy, tight, after])
    # Ahead of the roomy job: 2 (running) + 4 (gang) + 4 + 4 (b's two, at
    # the overall size) GPU-hours. Its 10 h and the tight one's 30 min are
    # limits, not sizes: each counts c's size, the overall 4 GPU-hours.
    assert waits[roomy] == pytest.approx(14 * HOUR / 4, rel=1e-3)
    assert waits[tight] == pytest.approx(18 * HOUR / 4, rel=1e-3)
    assert waits[after] == pytest.approx(22 * HOUR / 4, rel=1e-3)


def test_a_job_past_the_longest_recent_fifo_wait_goes_first_and_holds_the_reservation(
    session, busy
):
    gang, rival, small = busy
    _estimate(session)
    with session.begin():
        bound = wait_bound(session, utcnow(), RULES)
    # The longest estimate is the small job's 2.5 h; the gang has waited 5 h.
    assert bound == pytest.approx(2.5 * HOUR, rel=1e-3)
    with session.begin():
        jobs = session.scalars(select(Job).where(Job.id.in_([gang, rival, small]))).all()
        positions = {j: v.position for j, v in queue_views(session, jobs, RULES).items()}
    assert positions[gang] == 1  # fair share alone would put b's jobs first
    # Nobody knows when the running job ends: the 2 free GPUs are held for the gang.
    assert place_queued_jobs(session, utcnow(), rules=RULES).placed == []


def test_the_bound_is_the_rules_quantile_of_the_estimates_in_the_window(session, busy):
    _estimate(session)  # 0.5, 1.5 and 2.5 h; the running and finished jobs have none
    median = ServiceRules(fifo_wait_quantile=0.5)
    with session.begin():
        assert wait_bound(session, utcnow(), median) == pytest.approx(1.5 * HOUR, rel=1e-3)
        # Up to a thousand estimates the default quantile is the longest.
        assert wait_bound(session, utcnow(), RULES) == pytest.approx(2.5 * HOUR, rel=1e-3)


def test_without_the_bound_fair_share_decides_and_nothing_is_estimated(session, busy):
    gang, rival, small = busy
    off = ServiceRules(fifo_wait_factor=0)
    assert _estimate(session, off) == 0
    assert set(_estimated(session, [gang, rival, small]).values()) == {None}
    placed = {job_id for job_id, _ in place_queued_jobs(session, utcnow(), rules=off).placed}
    assert placed == {small}


@pytest.mark.usefixtures("busy")
def test_estimates_older_than_the_window_do_not_bound_waits(session):
    old = make_project(session, "old")
    ancient = aged_job(
        session, "ancient", 1, project=old, ago=timedelta(days=100), status=JobStatus.CANCELLED
    )
    with session.begin():
        session.execute(update(Job).where(Job.id == ancient).values(fifo_wait_seconds=900 * HOUR))
    _estimate(session)
    with session.begin():
        bound = wait_bound(session, utcnow(), RULES)
    assert bound == pytest.approx(2.5 * HOUR, rel=1e-3)


def test_a_running_job_is_ahead_of_every_queued_one_whenever_it_was_submitted(session, busy):
    gang, _, _ = busy
    a = make_project(session, "late")
    late = aged_job(session, "late", 2, project=a, status=JobStatus.RUNNING)
    ran_for(session, late, hours=0.5, live=True)
    _estimate(session)
    # Ahead of the gang: both running jobs, the older with 2 GPU-hours left,
    # the newer with 3 (its project has no finished job: the overall 4
    # GPU-hours, 1 held).
    assert _estimated(session, [gang])[gang] == pytest.approx((2 + 3) * HOUR / 4, rel=1e-3)


@pytest.mark.parametrize("factor", [1.0, 0.0])
def test_queue_positions_show_the_wait_bound_in_a_queue_of_one_project(session, factor):
    # One project whose jobs never ran: the queue's order would be plain
    # priority then age, were it not for a job past the wait bound.
    make_cluster(session, "local", gpus=4)
    solo = make_project(session, "solo")
    old = aged_job(session, "old", 1, project=solo, ago=timedelta(hours=5))
    (urgent,) = insert_jobs(
        session, 1, spec=small_spec("urgent", gpus=1), project_id=solo.id, priority=100
    )
    with session.begin():  # first come, first served would make it wait 2 h
        session.execute(update(Job).where(Job.id == urgent).values(fifo_wait_seconds=2 * HOUR))
    rules = ServiceRules(fifo_wait_factor=factor)
    with session.begin():
        jobs = session.scalars(select(Job).where(Job.id.in_([old, urgent]))).all()
        positions = {j: v.position for j, v in queue_views(session, jobs, rules).items()}
    if factor:  # the old job has waited 5 h, past the bound: it goes first
        assert (positions[old], positions[urgent]) == (1, 2)
    else:
        assert (positions[urgent], positions[old]) == (1, 2)
