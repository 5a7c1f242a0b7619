"""The attained-service order on a real database: levels from the jobs'
attempts, starvation promotion with a reservation pinned to the promoted job,
and attained-service preemption (most attained first, never before the
minimum run, never a job without checkpoints)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from tests.factories import aged_job, make_cluster, make_project, ran_for
from trainplane.db.base import utcnow
from trainplane.db.models import Job, JobAttempt
from trainplane.jobs.service_queues import HOUR, ServiceRules
from trainplane.jobs.states import JobStatus
from trainplane.services.placement import place_queued_jobs
from trainplane.services.preemption import preempt_for_waiting_jobs
from trainplane.services.queue import queue_views

# The default bound is long (a backstop); these tests set two days to see it act.
RULES = ServiceRules(starve_after_seconds=48 * HOUR)
CHECKPOINTS = {"checkpoint": {"every_steps": 10}}


def _service_preemptions(session, rules=RULES, now=None):
    """One attained-service preemption pass (no priority preemption)."""
    return preempt_for_waiting_jobs(
        session,
        now or utcnow(),
        grace_seconds=60.0,
        min_runtime_seconds=600.0,
        priorities=False,
        rules=rules,
    )


def _placed(session, now=None):
    result = place_queued_jobs(session, now or utcnow(), rules=RULES)
    return {job_id for job_id, _ in result.placed}


def requeued_and_new(session):
    """On one GPU: an older job requeued after 2 GPU-hours (past the first
    threshold, 1 GPU-hour) and a newer one of no service, of one project."""
    make_cluster(session, "local", gpus=1)
    a = make_project(session, "a")
    older = aged_job(session, "older", 1, project=a, ago=timedelta(hours=3))
    ran_for(session, older, hours=2)
    newer = aged_job(session, "newer", 1, project=a, ago=timedelta(minutes=1))
    return older, newer


def test_less_attained_service_goes_first_and_a_job_past_a_threshold_is_demoted(session):
    older, newer = requeued_and_new(session)
    positions = _positions(session, [older, newer])
    assert (positions[newer], positions[older]) == (1, 2)
    assert _placed(session) == {newer}


def test_a_job_below_the_threshold_keeps_its_place_by_submit_time(session):
    make_cluster(session, "local", gpus=1)
    a = make_project(session, "a")
    older = aged_job(session, "older", 1, project=a, ago=timedelta(hours=3))
    ran_for(session, older, hours=0.5)  # half a GPU-hour: still the first level
    aged_job(session, "newer", 1, project=a, ago=timedelta(minutes=1))
    assert _placed(session) == {older}


def _blocked_gang(session, *, waited):
    """A 4-GPU cluster, 2 GPUs held by a job with no max_runtime; project a's
    4-GPU job has waited ``waited``; project b (no GPUs in use, so first by
    fair share) has a 4-GPU job and a 2-GPU job that would fit now."""
    cluster = make_cluster(session, "local", gpus=4)
    a, b = make_project(session, "a"), make_project(session, "b")
    running = aged_job(session, "running", 2, project=a, status=JobStatus.RUNNING)
    ran_for(session, running, hours=1, cluster=cluster.id, live=True)
    gang = aged_job(session, "gang", 4, project=a, ago=waited)
    rival = aged_job(session, "rival", 4, project=b, ago=timedelta(minutes=2))
    small = aged_job(session, "small", 2, project=b, ago=timedelta(minutes=1))
    return running, gang, rival, small


def test_aging_promotes_a_waiting_job_whose_reservation_then_holds_backfill(session):
    _, gang, rival, small = _blocked_gang(session, waited=timedelta(hours=49))
    assert _positions(session, [gang, rival, small])[gang] == 1  # ahead of fair share's choice
    # Nobody knows when the running job ends, so nothing may backfill the GPUs
    # the promoted gang will need, pass after pass.
    assert _placed(session) == set()
    assert _placed(session, utcnow() + timedelta(minutes=5)) == set()


def test_before_its_bound_a_blocked_job_holds_back_nobody(session):
    *_, small = _blocked_gang(session, waited=timedelta(hours=1))
    # No promoted job and no known end: the blocked gangs reserve nothing.
    assert _placed(session) == {small}


def test_the_pinned_reservation_survives_a_pass_where_another_job_heads_the_order(session):
    running, gang, rival, _ = _blocked_gang(session, waited=timedelta(hours=49))
    later = utcnow() + timedelta(minutes=10)
    # A newcomer of a project with nothing in use heads fair share's order.
    c = make_project(session, "c")
    newcomer = aged_job(session, "newcomer", 4, project=c)
    assert _placed(session, later) == set()
    with session.begin():  # the running job ends: its GPUs go to the pinned gang
        session.execute(
            update(JobAttempt)
            .where(JobAttempt.job_id == running)
            .values(status="SUCCEEDED", finished_at=utcnow())
        )
    assert _placed(session, later) == {gang}
    assert {rival, newcomer}.isdisjoint(_placed(session, later))


def test_attained_service_preempts_the_most_attained_after_its_minimum_run_with_checkpoints(
    session,
):
    cluster = make_cluster(session, "local", gpus=3)
    a, b = make_project(session, "a"), make_project(session, "b")
    running = {}
    for name, hours, spec in (
        ("veteran", 5 / 60, CHECKPOINTS),  # 20 GPU-hours before, but only 5 min in this run
        ("middle", 3.0, CHECKPOINTS),
        ("nockpt", 4.0, {}),  # most attained that may run, but it saves no checkpoints
    ):
        job_id = aged_job(session, name, 1, project=a, status=JobStatus.RUNNING, **spec)
        if name == "veteran":
            ran_for(session, job_id, hours=20)
        ran_for(session, job_id, hours=hours, cluster=cluster.id, live=True, number=2)
        running[name] = job_id
    waiting = [
        aged_job(session, f"w{i}", 1, project=b, ago=timedelta(minutes=2 - i)) for i in (0, 1)
    ]
    asked = _service_preemptions(session)
    assert [(x.preemptor_job, x.victim_job) for x in asked] == [(waiting[0], running["middle"])]


def test_a_newcomer_made_to_wait_stops_a_job_only_once_it_has_waited(session):
    """With ``preempt_after_wait_seconds`` set, a queued job of no service
    stops nobody until it has waited that long (GPUs may free up by
    themselves); then it stops the most attained job."""
    rules = replace(RULES, preempt_after_wait_seconds=HOUR)
    cluster = make_cluster(session, "local", gpus=1)
    a, b = make_project(session, "a"), make_project(session, "b")
    long = aged_job(session, "long", 1, project=a, status=JobStatus.RUNNING, **CHECKPOINTS)
    ran_for(session, long, hours=30, cluster=cluster.id, live=True)
    newcomer = aged_job(session, "newcomer", 1, project=b, ago=timedelta(minutes=50))
    assert _service_preemptions(session, rules) == []
    # Eleven minutes later it has waited an hour.
    asked = _service_preemptions(session, rules, now=utcnow() + timedelta(minutes=11))
    assert [(x.preemptor_job, x.victim_job) for x in asked] == [(newcomer, long)]
    # By default it would not have waited at all.
    assert RULES.preempt_after_wait_seconds == 0


def _positions(session, job_ids):
    """Each job's queue position, as users see it."""
    with session.begin():
        jobs = session.scalars(select(Job).where(Job.id.in_(job_ids))).all()
        return {job_id: view.position for job_id, view in queue_views(session, jobs, RULES).items()}


def test_at_the_top_level_an_older_queued_job_stops_a_newer_running_one(session):
    """Past the last threshold (100 GPU-hours) the order is first come, first
    served: the job submitted first takes the GPUs back from a newer one of
    the same level; below it, equals never stop each other."""
    cluster = make_cluster(session, "local", gpus=4)
    a, b = make_project(session, "a"), make_project(session, "b")
    newer = aged_job(session, "newer", 4, project=b, status=JobStatus.RUNNING, **CHECKPOINTS)
    ran_for(session, newer, hours=30, cluster=cluster.id, live=True)  # 120 GPU-hours: top level
    older = aged_job(session, "older", 4, project=a, ago=timedelta(days=3), **CHECKPOINTS)
    ran_for(session, older, hours=26)  # 104 GPU-hours, then requeued: top level too
    asked = _service_preemptions(session)
    assert [(x.preemptor_job, x.victim_job) for x in asked] == [(older, newer)]


def test_below_the_top_level_a_queued_job_never_stops_a_running_peer(session):
    cluster = make_cluster(session, "local", gpus=4)
    a, b = make_project(session, "a"), make_project(session, "b")
    newer = aged_job(session, "newer", 4, project=b, status=JobStatus.RUNNING, **CHECKPOINTS)
    ran_for(session, newer, hours=5, cluster=cluster.id, live=True)  # 20 GPU-hours: level 2
    older = aged_job(session, "older", 4, project=a, ago=timedelta(days=1), **CHECKPOINTS)
    ran_for(session, older, hours=4)  # 16 GPU-hours: level 2 as well
    asked = _service_preemptions(session)
    assert asked == []


def _shared_cluster(session, mid_hours=5):
    """8 GPUs, so the long runs' default share is 4: a job of project b runs
    on 4 (20 GPU-hours by default: level 2, in the share)."""
    cluster = make_cluster(session, "local", gpus=8)
    a, b, c = make_project(session, "a"), make_project(session, "b"), make_project(session, "c")
    mid = aged_job(session, "mid", 4, project=b, status=JobStatus.RUNNING, **CHECKPOINTS)
    ran_for(session, mid, hours=mid_hours, cluster=cluster.id, live=True)
    return cluster, a, c, mid


def test_the_top_levels_share_shields_its_oldest_running_job_from_newcomers(session):
    cluster, a, c, mid = _shared_cluster(session)
    long = aged_job(session, "long", 4, project=a, status=JobStatus.RUNNING, **CHECKPOINTS)
    ran_for(session, long, hours=30, cluster=cluster.id, live=True)  # 120 GPU-hours: top level
    fresh = aged_job(session, "fresh", 4, project=c, **CHECKPOINTS)
    # Most attained first would stop the long run; within its level's share,
    # it stands as the lowest level does, so the level-2 job makes room.
    asked = _service_preemptions(session)
    assert [(x.preemptor_job, x.victim_job) for x in asked] == [(fresh, mid)]


def test_without_the_share_a_newcomer_stops_the_most_attained_job(session):
    cluster, a, c, _ = _shared_cluster(session)
    long = aged_job(session, "long", 4, project=a, status=JobStatus.RUNNING, **CHECKPOINTS)
    ran_for(session, long, hours=30, cluster=cluster.id, live=True)
    fresh = aged_job(session, "fresh", 4, project=c, **CHECKPOINTS)
    asked = preempt_for_waiting_jobs(
        session,
        utcnow(),
        grace_seconds=60.0,
        min_runtime_seconds=600.0,
        priorities=False,
        rules=replace(RULES, top_share=0.0),
    )
    assert [(x.preemptor_job, x.victim_job) for x in asked] == [(fresh, long)]


@pytest.mark.parametrize("share_levels", [2, 1])
def test_the_share_shields_a_level_two_run_when_the_top_level_holds_none(session, share_levels):
    """Most GPU-hours may be in runs of 10-100 GPU-hours that never reach
    the top level: the share covers the level below it too (by default), so
    a newcomer stops the short run; with the share the top level's alone,
    the most attained, the level-2 run."""
    cluster, _, c, mid = _shared_cluster(session)
    b2 = make_project(session, "b2")
    short = aged_job(session, "short", 4, project=b2, status=JobStatus.RUNNING, **CHECKPOINTS)
    ran_for(session, short, hours=0.5, cluster=cluster.id, live=True)  # 2 GPU-hours: level 1
    fresh = aged_job(session, "fresh", 4, project=c, **CHECKPOINTS)
    asked = _service_preemptions(session, rules=replace(RULES, share_levels=share_levels))
    victim = short if share_levels == 2 else mid
    assert [(x.preemptor_job, x.victim_job) for x in asked] == [(fresh, victim)]


def test_a_level_two_job_owed_the_share_is_placed_before_newer_short_jobs(session):
    _, a, c, _ = _shared_cluster(session, mid_hours=0.5)  # 2 GPU-hours: level 1, not in the share
    old = aged_job(session, "old", 4, project=a, ago=timedelta(days=1), **CHECKPOINTS)
    ran_for(session, old, hours=5)  # 20 GPU-hours, requeued: level 2, holding nothing
    aged_job(session, "fresh", 4, project=c, **CHECKPOINTS)
    assert _placed(session) == {old}


def test_a_top_level_owed_its_share_is_placed_before_newer_short_jobs(session):
    _, a, c, _ = _shared_cluster(session, mid_hours=0.5)
    old = aged_job(session, "old", 4, project=a, ago=timedelta(days=2), **CHECKPOINTS)
    ran_for(session, old, hours=26)  # 104 GPU-hours, requeued: top level, holding nothing
    aged_job(session, "fresh", 4, project=c, **CHECKPOINTS)
    assert _placed(session) == {old}


def test_a_top_level_holding_its_share_waits_behind_newer_short_jobs(session):
    cluster, a, c, _ = _shared_cluster(session)
    holding = aged_job(session, "holding", 4, project=a, status=JobStatus.RUNNING, **CHECKPOINTS)
    ran_for(session, holding, hours=30, cluster=cluster.id, live=True)  # its 4 GPUs: the share
    with session.begin():  # the level-2 job ended: 4 GPUs are free
        session.execute(
            update(JobAttempt)
            .where(JobAttempt.job_id != holding)
            .values(status="SUCCEEDED", finished_at=utcnow())
        )
        session.execute(
            update(Job).where(Job.name == "mid").values(status=JobStatus.SUCCEEDED.value)
        )
    old = aged_job(session, "old", 4, project=a, ago=timedelta(days=2), **CHECKPOINTS)
    ran_for(session, old, hours=26, number=1)
    fresh = aged_job(session, "fresh", 4, project=c, **CHECKPOINTS)
    assert _placed(session) == {fresh}


@pytest.mark.parametrize("share_levels", [2, 1])
def test_past_the_share_the_long_runs_queue_first_come_first_served(session, share_levels):
    """With the share held, the long runs still queue by submit time among
    themselves: a newer level-2 job does not pass an older top-level one
    (with the share the top level's alone, level 2 goes first, by attained
    service)."""
    _, a, c, _ = _shared_cluster(session, mid_hours=30)  # 120 GPU-hours: the share is held
    older = aged_job(session, "older", 4, project=a, ago=timedelta(days=2), **CHECKPOINTS)
    ran_for(session, older, hours=26)  # 104 GPU-hours, requeued: top level
    newer = aged_job(session, "newer", 4, project=c, ago=timedelta(days=1), **CHECKPOINTS)
    ran_for(session, newer, hours=5)  # 20 GPU-hours, requeued: level 2
    rules = replace(RULES, share_levels=share_levels)
    placed = {job_id for job_id, _ in place_queued_jobs(session, utcnow(), rules=rules).placed}
    assert placed == ({older} if share_levels == 2 else {newer})
