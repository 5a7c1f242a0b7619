"""Entry levels on a real database: decided once per job from its project's
finished jobs of the same GPU count, noted in its history when it enters at
the top level, and applied by the placement pass, attained-service
preemption, queue positions and plans."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from tests.factories import aged_job, make_cluster, make_project, ran_for
from tests.services.test_service_order import _service_preemptions
from trainplane.api.app import create_app
from trainplane.db.base import utcnow
from trainplane.db.models import Job, JobEvent
from trainplane.jobs.service_queues import ServiceRules
from trainplane.jobs.states import JobStatus
from trainplane.services.entry_levels import decide_entry_levels, entry_level_for
from trainplane.services.placement import place_queued_jobs
from trainplane.services.queue import queue_views

RULES = ServiceRules()
TOP = RULES.top_level
CHECKPOINTS = {"checkpoint": {"every_steps": 10}}


def finished_jobs(session, project, gpus, hours, status=JobStatus.SUCCEEDED):
    """One finished job of ``project`` on ``gpus`` GPUs per entry of
    ``hours`` (how long it ran), the first listed finished last."""
    now = utcnow()
    for index, ran in enumerate(hours):
        job = aged_job(
            session, f"done-{index}", gpus, project=project, ago=timedelta(days=30), status=status
        )
        ran_for(session, job, hours=ran)
        with session.begin():
            session.execute(
                update(Job)
                .where(Job.id == job)
                .values(finished_at=now - timedelta(minutes=index), entry_level=0)
            )


def _decide(session, rules=RULES):
    with session.begin():
        return decide_entry_levels(session, utcnow(), rules)


def _entry_levels(session, job_ids):
    with session.begin():
        return dict(
            session.execute(select(Job.id, Job.entry_level).where(Job.id.in_(job_ids))).all()
        )


def _notes(session, job_id):
    with session.begin():
        return session.scalars(select(JobEvent.reason).where(JobEvent.job_id == job_id)).all()


@pytest.fixture
def long_runs(session):
    """Project a's latest five finished 4-GPU jobs: three ran 30 h (120
    GPU-hours, past the top threshold), two ran an hour (a failed one among
    them: what a job held counts, not how it ended)."""
    a = make_project(session, "a")
    finished_jobs(session, a, 4, [30, 1, 30, 30])
    finished_jobs(session, a, 4, [1], status=JobStatus.FAILED)
    return a


def test_a_job_whose_peers_mostly_reached_the_top_level_enters_there(session, long_runs):
    b = make_project(session, "b")
    entering = aged_job(session, "entering", 4, project=long_runs)
    narrower = aged_job(session, "narrower", 2, project=long_runs)  # no 2-GPU peers
    other = aged_job(session, "other", 4, project=b)  # b has no finished job
    running = aged_job(session, "running", 4, project=long_runs, status=JobStatus.RUNNING)
    assert _decide(session) == 4
    assert _entry_levels(session, [entering, narrower, other, running]) == {
        entering: TOP,
        narrower: 0,
        other: 0,
        running: TOP,  # started before the scheduler saw it: decided while it runs
    }
    [note] = [n for n in _notes(session, entering) if "long runs" in n]
    assert "3 of its project's latest 5 finished 4-GPU jobs held 100 GPU-hours" in note
    assert not [n for n in _notes(session, narrower) if "long runs" in n]
    # Decided once: later passes leave it, whatever finishes in between.
    finished_jobs(session, long_runs, 4, [1, 1, 1, 1, 1, 1])
    assert _decide(session) == 0
    assert _entry_levels(session, [entering]) == {entering: TOP}
    fresh = aged_job(session, "fresh", 4, project=long_runs)
    assert _decide(session) == 1
    assert _entry_levels(session, [fresh]) == {fresh: 0}  # now 3 of the latest 11


def test_too_few_peers_or_the_setting_off_leave_a_job_to_climb(session):
    a = make_project(session, "a")
    finished_jobs(session, a, 4, [30, 30, 30, 30])
    with session.begin():
        assert entry_level_for(session, a.id, 4, utcnow(), RULES) == 0  # 4 < 5 peers
    finished_jobs(session, a, 4, [30])
    with session.begin():
        assert entry_level_for(session, a.id, 4, utcnow(), RULES) == TOP
        off = replace(RULES, entry_top_fraction=0.0)
        assert entry_level_for(session, a.id, 4, utcnow(), off) == 0
    job = aged_job(session, "job", 4, project=a)
    _decide(session, replace(RULES, entry_top_fraction=0.0))
    assert _entry_levels(session, [job]) == {job: 0}


def _top_share_held(session, long_runs):
    """8 GPUs: project c's top-level job holds 4 (the share), 4 are free.
    Queued: a's 4-GPU job (submitted two hours ago) and b's newer one."""
    cluster = make_cluster(session, "local", gpus=8)
    b, c = make_project(session, "b"), make_project(session, "c")
    holding = aged_job(session, "holding", 4, project=c, status=JobStatus.RUNNING, **CHECKPOINTS)
    ran_for(session, holding, hours=30, cluster=cluster.id, live=True)
    entering = aged_job(session, "entering", 4, project=long_runs, ago=timedelta(hours=2))
    short = aged_job(session, "short", 4, project=b, ago=timedelta(minutes=1))
    return entering, short


def _positions(session, job_ids, rules=RULES):
    with session.begin():
        jobs = session.scalars(select(Job).where(Job.id.in_(job_ids))).all()
        return {job_id: view.position for job_id, view in queue_views(session, jobs, rules).items()}


@pytest.mark.parametrize("entering_first", [False, True])
def test_an_entered_job_waits_with_the_top_level_behind_newer_short_jobs(
    session, long_runs, entering_first
):
    entering, short = _top_share_held(session, long_runs)
    rules = RULES if not entering_first else replace(RULES, entry_top_fraction=0.0)
    _decide(session, rules)
    expected = (2, 1) if not entering_first else (1, 2)
    positions = _positions(session, [entering, short], rules)
    assert (positions[entering], positions[short]) == expected
    placed = {job for job, _ in place_queued_jobs(session, utcnow(), rules=rules).placed}
    assert placed == ({short} if not entering_first else {entering})


def test_queue_positions_of_one_project_follow_entry_levels(session, long_runs):
    """One project's queue is shown in plain priority and submit order only
    while that is the order: an entered job breaks it."""
    cluster = make_cluster(session, "local", gpus=8)
    holding = aged_job(session, "holding", 4, project=long_runs, status=JobStatus.RUNNING)
    ran_for(session, holding, hours=30, cluster=cluster.id, live=True)  # the top level's share
    entering = aged_job(session, "entering", 4, project=long_runs, ago=timedelta(hours=2))
    fresh = aged_job(session, "fresh", 2, project=long_runs)  # no 2-GPU peers: level 0
    _decide(session)
    positions = _positions(session, [entering, fresh])
    assert (positions[fresh], positions[entering]) == (1, 2)
    assert {job for job, _ in place_queued_jobs(session, utcnow()).placed} == {fresh}


def _entered_running(session, long_runs, *, gpus):
    """On ``gpus`` GPUs, a's 4-GPU job that entered at the top level runs
    for 12 minutes (0.8 GPU-hours, the lowest level by its service);
    project b's new 4-GPU job waits."""
    cluster = make_cluster(session, "local", gpus=gpus)
    entered = aged_job(
        session, "entered", 4, project=long_runs, status=JobStatus.RUNNING, **CHECKPOINTS
    )
    ran_for(session, entered, hours=0.2, cluster=cluster.id, live=True)
    _decide(session)
    waiting = aged_job(session, "waiting", 4, project=make_project(session, "b"), **CHECKPOINTS)
    return cluster, entered, waiting


def _preemptions(session):
    return [(x.preemptor_job, x.victim_job) for x in _service_preemptions(session)]


def test_a_running_entered_job_stands_at_the_top_level_for_preemption(session, long_runs):
    _, entered, waiting = _entered_running(session, long_runs, gpus=4)
    # Outside the top level's share (2 of 4 GPUs), a newcomer of the lowest
    # level stops it as it would stop any long run; by service alone the two
    # are peers, and a queued job never stops a running peer.
    assert _preemptions(session) == [(waiting, entered)]
    with session.begin():
        session.execute(update(Job).where(Job.id == entered).values(entry_level=0))
    assert _preemptions(session) == []


def test_within_the_share_a_running_entered_job_is_shielded(session, long_runs):
    cluster, _, waiting = _entered_running(session, long_runs, gpus=8)
    other = aged_job(
        session,
        "other",
        4,
        project=make_project(session, "c"),
        status=JobStatus.RUNNING,
        **CHECKPOINTS,
    )
    ran_for(session, other, hours=3, cluster=cluster.id, live=True)  # 12 GPU-hours: level 2
    with session.begin():
        session.execute(update(Job).where(Job.id == other).values(entry_level=0))
    # The entered job holds the share (4 of 8): the level-2 job makes room.
    assert _preemptions(session) == [(waiting, other)]


def test_a_plan_ranks_a_would_be_job_at_its_entry_level(settings, session, long_runs):
    _top_share_held(session, long_runs)
    _decide(session)
    spec = {
        "kind": "train",
        "name": "planned",
        "project": "a",
        "entrypoint": {"command": ["true"]},
        "resources": {"gpus": 4},
    }
    with TestClient(create_app(settings)) as api:
        entered = api.post("/v1/jobs/plan", json=spec).json()["placement"]
        climbing = api.post("/v1/jobs/plan", json={**spec, "resources": {"gpus": 2}}).json()[
            "placement"
        ]
    # Entering at the top level, it queues after both jobs (the short one,
    # then a's older one, first come, first served); a 2-GPU job of a has no
    # peers: at the lowest level, it goes behind the short job submitted
    # before it and ahead of a's entered one.
    assert entered["queue_position"] == 3
    assert climbing["queue_position"] == 2
