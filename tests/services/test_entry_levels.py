"""Entry levels on a real database: decided once per job from its project's
finished jobs of the same GPU count, noted in its history when it enters at
the top level, and applied, past a job's first level, by the placement
pass, attained-service preemption and queue positions."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from tests.factories import aged_job, make_cluster, make_project, ran_for
from tests.services.test_service_order import _service_preemptions
from trainplane.db.base import utcnow
from trainplane.db.models import Job, JobEvent
from trainplane.jobs.service_queues import ServiceRules
from trainplane.jobs.states import JobStatus
from trainplane.services.entry_levels import decide_entry_levels
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


def _decided_for_a_new_job(session, project, rules=RULES):
    job = aged_job(session, "new", 4, project=project)
    _decide(session, rules)
    return _entry_levels(session, [job])[job]


def test_too_few_peers_or_the_setting_off_leave_a_job_to_climb(session):
    a = make_project(session, "a")
    finished_jobs(session, a, 4, [30, 30, 30, 30])
    assert _decided_for_a_new_job(session, a) == 0  # 4 peers, fewer than 5
    finished_jobs(session, a, 4, [30])
    assert _decided_for_a_new_job(session, a) == TOP
    assert _decided_for_a_new_job(session, a, replace(RULES, entry_top_fraction=0.0)) == 0


def _top_share_held(session, long_runs):
    """8 GPUs: project c's top-level job holds 4 (the share), 4 are free.
    Queued, both requeued after half an hour on 4 GPUs (2 GPU-hours, past
    the first level): a's job submitted two hours ago, b's an hour ago."""
    cluster = make_cluster(session, "local", gpus=8)
    b, c = make_project(session, "b"), make_project(session, "c")
    holding = aged_job(session, "holding", 4, project=c, status=JobStatus.RUNNING, **CHECKPOINTS)
    ran_for(session, holding, hours=30, cluster=cluster.id, live=True)
    entering = aged_job(session, "entering", 4, project=long_runs, ago=timedelta(hours=2))
    ran_for(session, entering, hours=0.5)
    rival = aged_job(session, "rival", 4, project=b, ago=timedelta(hours=1))
    ran_for(session, rival, hours=0.5)
    return entering, rival


def _positions(session, job_ids, rules=RULES):
    with session.begin():
        jobs = session.scalars(select(Job).where(Job.id.in_(job_ids))).all()
        return {job_id: view.position for job_id, view in queue_views(session, jobs, rules).items()}


@pytest.mark.parametrize("entered", [True, False])
def test_past_its_first_level_an_entered_job_waits_with_the_top_level(session, long_runs, entered):
    entering, rival = _top_share_held(session, long_runs)
    rules = RULES if entered else replace(RULES, entry_top_fraction=0.0)
    _decide(session, rules)
    # Entered, it is a top-level job while the top level holds its share:
    # behind the lower levels. Climbing, it is the rival's peer at level 1,
    # and older.
    first, second = (rival, entering) if entered else (entering, rival)
    positions = _positions(session, [entering, rival], rules)
    assert (positions[first], positions[second]) == (1, 2)
    placed = {job for job, _ in place_queued_jobs(session, utcnow(), rules=rules).placed}
    assert placed == {first}


def test_before_its_first_threshold_an_entered_job_is_at_the_lowest_level(session, long_runs):
    """A quick run of a project of long runs is not kept waiting with them."""
    _, rival = _top_share_held(session, long_runs)
    quick = aged_job(session, "quick", 4, project=long_runs, ago=timedelta(minutes=1))
    _decide(session)
    assert _entry_levels(session, [quick]) == {quick: TOP}
    assert _positions(session, [quick, rival])[quick] == 1
    assert {job for job, _ in place_queued_jobs(session, utcnow()).placed} == {quick}


def test_queue_positions_of_one_project_follow_entry_levels(session, long_runs):
    cluster = make_cluster(session, "local", gpus=8)
    holding = aged_job(session, "holding", 4, project=long_runs, status=JobStatus.RUNNING)
    ran_for(session, holding, hours=30, cluster=cluster.id, live=True)  # the top level's share
    entering = aged_job(session, "entering", 4, project=long_runs, ago=timedelta(hours=2))
    ran_for(session, entering, hours=0.5)  # 2 GPU-hours: the top level, entered
    other = aged_job(session, "other", 2, project=long_runs, ago=timedelta(hours=1))
    ran_for(session, other, hours=1)  # 2 GPU-hours, no 2-GPU peers: level 1
    _decide(session)
    positions = _positions(session, [entering, other])
    assert (positions[other], positions[entering]) == (1, 2)
    assert {job for job, _ in place_queued_jobs(session, utcnow()).placed} == {other}


def _entered_running(session, long_runs, *, gpus, hours=0.5):
    """On ``gpus`` GPUs, a's 4-GPU job that entered at the top level has
    run for ``hours`` (by default 2 GPU-hours, level 1 by its service alone);
    project b's 4-GPU job, requeued after 2 GPU-hours too, waits."""
    cluster = make_cluster(session, "local", gpus=gpus)
    entered = aged_job(
        session, "entered", 4, project=long_runs, status=JobStatus.RUNNING, **CHECKPOINTS
    )
    ran_for(session, entered, hours=hours, cluster=cluster.id, live=True)
    _decide(session)
    b = make_project(session, "b")
    waiting = aged_job(session, "waiting", 4, project=b, ago=timedelta(hours=2), **CHECKPOINTS)
    ran_for(session, waiting, hours=0.5)
    with session.begin():
        session.execute(update(Job).where(Job.id == waiting).values(entry_level=0))
    return cluster, entered, waiting


def _preemptions(session, rules=RULES):
    return [(x.preemptor_job, x.victim_job) for x in _service_preemptions(session, rules)]


def test_a_running_entered_job_stands_at_the_top_level_for_preemption(session, long_runs):
    _, entered, waiting = _entered_running(session, long_runs, gpus=4)
    # Outside the top level's share (2 of 4 GPUs), a level-1 job stops it as
    # it would stop any long run; by service alone the two are peers at
    # level 1, and a queued job never stops a running peer.
    assert _preemptions(session) == [(waiting, entered)]
    with session.begin():
        session.execute(update(Job).where(Job.id == entered).values(entry_level=0))
    assert _preemptions(session) == []


@pytest.mark.parametrize("share", [0.5, 0.0])
def test_within_the_share_a_running_entered_job_is_shielded(session, long_runs, share):
    # The entered job has held 16 GPU-hours, the other running job 12.
    cluster, entered, _ = _entered_running(session, long_runs, gpus=8, hours=4)
    other = aged_job(
        session,
        "other",
        4,
        project=make_project(session, "c"),
        status=JobStatus.RUNNING,
        **CHECKPOINTS,
    )
    ran_for(session, other, hours=3, cluster=cluster.id, live=True)
    with session.begin():
        session.execute(update(Job).where(Job.id == other).values(entry_level=0))
    # Most attained first stops the entered job when no share is owed; it
    # holds the top level's share (4 of 8) and stands as the lowest level,
    # so the other job (level 2) gives way to the level-1 one.
    victims = [victim for _, victim in _preemptions(session, replace(RULES, top_share=share))]
    assert victims == ([other] if share else [entered])
