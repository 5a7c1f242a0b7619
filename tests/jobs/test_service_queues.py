"""The attained-service order, its starvation promotion, the pinned
reservation and attained-service preemption (pure code, no database)."""

from __future__ import annotations

from dataclasses import replace

from trainplane.jobs.placement import ClusterState, Demand, Release, plan
from trainplane.jobs.preemption import RunningAttempt, choose_service_preemptions
from trainplane.jobs.service_queues import (
    HOUR,
    HeldJob,
    QueuedJob,
    ServiceRules,
    as_preemptor,
    rank_queue,
    service_level,
    share_in_use,
    shield_top_share,
    standing,
    starved,
)

RULES = ServiceRules()


def _queued(job_id, *, gpus=1, project="a", submitted=0.0, attained=0.0, waited=0.0, priority=50):
    return QueuedJob(
        Demand(job_id, gpus, project_id=project), priority, submitted, attained, waited
    )


def _order(jobs, in_use=None):
    return [d.job_id for d in rank_queue(jobs, RULES, in_use=in_use or {}, weights={}).order]


def test_levels_cut_at_the_thresholds():
    assert [service_level(h * HOUR, RULES) for h in (0, 0.99, 1, 9.9, 10, 99, 100, 500)] == [
        0,
        0,
        1,
        1,
        2,
        2,
        3,
        3,
    ]


def test_less_service_first_then_fair_share_then_submit_time():
    jobs = [
        _queued("veteran", submitted=0, attained=2 * HOUR),  # past 1 GPU-hour: level 1
        _queued("a-old", submitted=1),
        _queued("a-new", submitted=2),
        _queued("b", project="b", submitted=3),
    ]
    # Project a holds 4 GPUs, b none: b's job comes first within level 0.
    assert _order(jobs, {"a": 4}) == ["b", "a-old", "a-new", "veteran"]


def test_a_job_past_its_bound_is_promoted_the_longest_overdue_first():
    bound = RULES.starve_after_seconds
    jobs = [
        _queued("fresh", submitted=5),
        _queued("late", submitted=2, attained=50 * HOUR, waited=bound + 10),
        _queued("later", submitted=1, attained=50 * HOUR, waited=bound + 5),
    ]
    ranked = rank_queue(jobs, RULES, in_use={}, weights={})
    assert [d.job_id for d in ranked.order] == ["late", "later", "fresh"]
    assert ranked.promoted == {"late", "later"}
    assert ranked.next_promotion_in == bound


def test_a_running_job_stays_promoted_only_while_its_wait_is_past_the_bound():
    waited = 15 * HOUR  # queued that long before it started, all stretches together
    attained = 200 * HOUR  # top level: attained service alone ranks it last

    def as_victim(bound_hours):
        promoted = starved(1, attained, waited, RULES, bound_hours * HOUR)
        return standing(50, attained, RULES, submitted=0.0, starved=promoted)

    newcomer = standing(50, 0.0, RULES, submitted=10.0)
    # Promoted at a 10-hour bound, no newcomer of its priority may stop it...
    assert as_victim(10) > newcomer
    # ...but once the bound rises past its wait it stands by attained service
    # again (the promotion follows the bound; see standing's doc).
    assert as_victim(20) < newcomer


def _cluster(free, releases):
    return ClusterState("c", "c", "cpu", 8, 8, in_use=8 - free, releases=releases)


def test_only_a_pinned_job_holds_a_reservation_nobody_can_date():
    queue = [Demand("gang", 8), Demand("small", 2)]
    unknown = _cluster(4, [Release(4, None)])
    assert plan(queue, [unknown], pinned=()).placements == [("small", "c")]
    pinned = plan(queue, [unknown], pinned={"gang"})
    assert (pinned.placements, pinned.reserved_job) == ([], "gang")
    # With known ends, EASY backfill works for everyone as before.
    dated = plan(
        [Demand("gang", 8), Demand("small", 2, max_runtime_seconds=60)],
        [_cluster(4, [Release(4, 600.0)])],
        pinned=(),
    )
    assert (dated.placements, dated.reserved_job) == ([("small", "c")], "gang")


def _running(job_id, *, gpus=2, hours=2.0, attained_hours=None, checkpoints=True):
    return RunningAttempt(
        attempt_id=job_id,
        job_id=job_id,
        cluster_id="c",
        gpus=gpus,
        priority=50,
        running_seconds=hours * HOUR,
        attained_gpu_seconds=(attained_hours or hours * gpus) * HOUR,
        checkpoints=checkpoints,
    )


def _preempt(waiting, running, starved=()):
    ranks = {
        a.job_id: standing(
            50, a.attained_gpu_seconds, RULES, submitted=a.submitted, starved=a.job_id in starved
        )
        for a in running
    }
    new = {d.job_id: standing(50, 0.0, RULES, submitted=1.0) for d in waiting}
    choices = choose_service_preemptions(
        waiting,
        new,
        [_cluster(0, [])],
        running,
        ranks,
        min_runtime_seconds=RULES.min_run_seconds,
    )
    return [(c.preemptor.job_id, [v.job_id for v in c.victims]) for c in choices]


def test_service_preemption_stops_the_most_attained_that_may_stop():
    running = [
        _running("young", hours=0.1, attained_hours=90),  # before its minimum run
        _running("no-checkpoints", hours=30, checkpoints=False),
        _running("most", hours=20),
        _running("less", hours=3),
        _running("first-level", gpus=2, hours=0.4),  # 0.8 GPU-hours: same level as the newcomer
    ]
    assert _preempt([Demand("new", 2)], running) == [("new", ["most"])]
    # Only when that lets it start: 6 GPUs cannot be freed from "most" and "less".
    assert _preempt([Demand("wide", 6)], running) == []
    # A job promoted for starving is not stopped again.
    assert _preempt([Demand("new", 2)], running, starved={"most"}) == [("new", ["less"])]


def test_top_level_jobs_rank_first_come_first_served_and_lower_levels_do_not():
    top = 150 * HOUR
    older, newer = (standing(50, top, RULES, submitted=t) for t in (1.0, 2.0))
    assert older > newer  # an older top-level job may stop a newer one
    low_older, low_newer = (standing(50, 5 * HOUR, RULES, submitted=t) for t in (1.0, 2.0))
    assert low_older == low_newer  # below the top, equals never stop each other
    assert low_newer > older  # and any lower level outranks the top


def test_a_job_that_would_lose_much_work_waits_for_its_next_checkpoint():
    fresh = replace(_running("fresh", hours=20), since_checkpoint_seconds=60.0)
    midway = replace(_running("midway", hours=30), since_checkpoint_seconds=1500.0)
    unknown = _running("asks", hours=25)  # checkpoints when asked to stop: loses nothing

    def victims(running):
        ranks = {
            a.job_id: standing(50, a.attained_gpu_seconds, RULES, submitted=0.0) for a in running
        }
        choices = choose_service_preemptions(
            [Demand("new", 2)],
            {"new": standing(50, 0.0, RULES, submitted=1.0)},
            [_cluster(0, [])],
            running,
            ranks,
            min_runtime_seconds=RULES.min_run_seconds,
            loss_tolerance_seconds=RULES.loss_tolerance_seconds,
        )
        return [v.job_id for c in choices for v in c.victims]

    # The most attained ("midway") would lose 25 minutes: the next one goes.
    assert victims([midway, fresh]) == ["fresh"]
    assert victims([midway]) == []
    assert victims([midway, unknown]) == ["asks"]


def _ranked_with_share(top_in_use):
    jobs = [
        _queued("fresh", gpus=4, project="b", submitted=50.0),
        _queued("old-wide", gpus=32, project="a", submitted=1.0, attained=200 * HOUR),
        _queued("old-small", gpus=4, project="c", submitted=2.0, attained=150 * HOUR),
        _queued("young-wide", gpus=8, project="a", submitted=3.0, attained=120 * HOUR),
    ]
    return rank_queue(
        jobs, RULES, in_use={}, weights={}, share_in_use_gpus=top_in_use, capacity_gpus=64
    )


def test_a_top_level_owed_its_share_goes_first_and_its_head_holds_the_reservation():
    # Share: 32 of 64 GPUs. Holding 0, the level is owed 32: its oldest job
    # goes first whatever its size and is pinned; the next ones follow only
    # while the debt covers them (first come, first served: the 8-GPU job
    # waits behind the 4-GPU one that the debt no longer covers either).
    ranked = _ranked_with_share(top_in_use=0)
    assert [d.job_id for d in ranked.order] == ["old-wide", "fresh", "old-small", "young-wide"]
    assert ranked.pinned == {"old-wide"} and ranked.promoted == frozenset()
    # Holding 24, it is owed 8: the head (32) goes first anyway, nobody else.
    assert [d.job_id for d in _ranked_with_share(top_in_use=24).order][:2] == ["old-wide", "fresh"]


def test_a_top_level_holding_its_share_queues_after_the_lower_levels_and_pins_nobody():
    ranked = _ranked_with_share(top_in_use=32)
    assert [d.job_id for d in ranked.order] == ["fresh", "old-wide", "old-small", "young-wide"]
    assert ranked.pinned == frozenset()
    off = rank_queue(
        [_queued("fresh", submitted=5.0), _queued("old", submitted=1.0, attained=500 * HOUR)],
        replace(RULES, top_share=0.0),
        in_use={},
        weights={},
        capacity_gpus=64,
    )
    assert [d.job_id for d in off.order] == ["fresh", "old"] and off.pinned == frozenset()


def _held(job_id, gpus, submitted, attained_hours, *, starved=False):
    attained = attained_hours * HOUR
    return HeldJob(
        job_id,
        gpus,
        submitted,
        attained,
        standing(50, attained, RULES, submitted=submitted, starved=starved),
    )


def test_the_oldest_running_top_level_jobs_up_to_the_share_stand_as_the_lowest_level():
    held = [
        _held("top-newest", 8, 30.0, 900),
        _held("top-oldest", 8, 10.0, 900),
        _held("top-middle", 8, 20.0, 900),
        _held("mid", 8, 5.0, 20),
    ]
    shielded = shield_top_share(held, RULES, capacity_gpus=32)  # share: 16 GPUs
    lowest = (50, 0, 0, 0.0)
    assert shielded["top-oldest"] == lowest and shielded["top-middle"] == lowest
    assert shielded["top-newest"] == standing(50, 900 * HOUR, RULES, submitted=30.0)
    assert shielded["mid"] == standing(50, 20 * HOUR, RULES, submitted=5.0)
    assert share_in_use(held, RULES) == 32  # the level-2 job is in the share, the share full
    assert share_in_use(held, replace(RULES, share_levels=1)) == 24
    # A queued newcomer of the lowest level may stop the unshielded top-level
    # job or the level-2 one, never the shielded ones.
    newcomer = standing(50, 0.0, RULES, submitted=40.0)
    assert newcomer > shielded["top-newest"] and newcomer > shielded["mid"]
    assert not newcomer > shielded["top-oldest"]
    # A promoted job keeps its own (higher) standing; no share shields nobody.
    promoted = _held("promoted", 8, 1.0, 900, starved=True)
    assert shield_top_share([promoted], RULES, 32)["promoted"] == promoted.standing
    off = shield_top_share(held, replace(RULES, top_share=0.0), 32)
    assert off == {h.job_id: h.standing for h in held}


def test_the_share_shields_the_level_below_the_top_after_the_top_levels_jobs():
    # (id, submitted, GPU-hours attained), 8 GPUs each: levels 2, 3, 2, 1.
    runs = [("mid-newer", 5.0, 20), ("top", 30.0, 900), ("mid-older", 1.0, 20), ("short", 0.0, 2)]
    held = [_held(job_id, 8, submitted, hours) for job_id, submitted, hours in runs]
    lowest = (50, 0, 0, 0.0)
    shielded = shield_top_share(held, RULES, capacity_gpus=48)  # share: 24 GPUs
    assert [j for j in ("top", "mid-older", "mid-newer", "short") if shielded[j] == lowest] == [
        "top",
        "mid-older",
        "mid-newer",
    ]
    shielded = shield_top_share(held, RULES, capacity_gpus=32)  # 16: the top level's first
    assert [j for j in shielded if shielded[j] == lowest] == ["top", "mid-older"]
    top_only = shield_top_share(held, replace(RULES, share_levels=1), capacity_gpus=48)
    assert [j for j in top_only if top_only[j] == lowest] == ["top"]


def test_while_the_share_is_owed_the_level_below_the_top_follows_the_top_levels_jobs():
    jobs = [
        _queued("fresh", gpus=4, project="b", submitted=50.0),
        _queued("mid-newer", gpus=4, project="a", submitted=2.0, attained=20 * HOUR),
        _queued("top", gpus=4, project="c", submitted=3.0, attained=200 * HOUR),
        _queued("mid-older", gpus=4, project="a", submitted=1.0, attained=20 * HOUR),
    ]

    def ranked(rules, in_use):
        return rank_queue(
            jobs, rules, in_use={}, weights={}, share_in_use_gpus=in_use, capacity_gpus=16
        )

    # Owed 8: the top level's job first (pinned), then the oldest level-2 job.
    owed = ranked(RULES, 0)
    assert [d.job_id for d in owed.order] == ["top", "mid-older", "fresh", "mid-newer"]
    assert owed.pinned == {"top"}
    # Owed nothing: the levels' own order (the top level last).
    held = ranked(RULES, 8)
    assert [d.job_id for d in held.order] == ["fresh", "mid-older", "mid-newer", "top"]
    assert held.pinned == frozenset()
    # The share the top level's alone: the level-2 jobs wait in their level.
    top_only = ranked(replace(RULES, share_levels=1), 0)
    assert [d.job_id for d in top_only.order] == ["top", "fresh", "mid-older", "mid-newer"]
    # No job passes one the debt does not cover: a wide level-2 head waits
    # for the top level's job only, then holds the reservation if first.
    wide = [
        replace(j, demand=Demand(j.demand.job_id, 12, project_id="a"))
        if j.demand.job_id == "mid-older"
        else j
        for j in jobs
    ]
    ranked_wide = rank_queue(
        wide, RULES, in_use={}, weights={}, share_in_use_gpus=0, capacity_gpus=16
    )
    assert [d.job_id for d in ranked_wide.order][:2] == ["top", "fresh"]


def test_a_newcomer_made_to_wait_preempts_only_then_and_a_higher_priority_at_once():
    patience = HOUR
    patient = replace(RULES, preempt_after_wait_seconds=patience)
    running = [_running("long", hours=50)]
    victims = {"long": standing(50, 100 * HOUR, RULES, submitted=0.0)}

    def preempts(queued, rules=patient):
        ranked = rank_queue([queued], rules, in_use={}, weights={})
        choices = choose_service_preemptions(
            [queued.demand],
            ranked.standing,
            [_cluster(0, [])],
            running,
            victims,
            min_runtime_seconds=RULES.min_run_seconds,
        )
        return [v.job_id for c in choices for v in c.victims], ranked.next_preemptor_in

    # Fresh, it waits for GPUs that free up by themselves, and the queue says
    # when it may preempt instead.
    assert preempts(_queued("new", gpus=2, waited=600.0)) == ([], patience - 600.0)
    assert preempts(_queued("new", gpus=2, waited=patience)) == (["long"], None)
    # A promoted job, or one of a higher priority, stops others at once.
    promoted = as_preemptor(standing(50, 0.0, RULES, submitted=1.0, starved=True), 0.0, patient)
    assert promoted > victims["long"]
    high = as_preemptor(standing(90, 0.0, RULES, submitted=1.0), 0.0, patient)
    assert high > victims["long"]
    # Waiting, it stands below every running job of its priority, shielded or not.
    waiting = as_preemptor(standing(50, 0.0, RULES, submitted=1.0), 0.0, patient)
    lowest_running = standing(50, 10**6 * HOUR, RULES, submitted=10**9)
    assert waiting < lowest_running < (50, 0, 0, 0.0)
    # 0 (the default) turns the wait off: a newcomer preempts as soon as the order allows.
    assert preempts(_queued("new", gpus=2), RULES) == (["long"], None)


def test_past_the_share_the_long_runs_are_one_lane_by_submit_time():
    jobs = [
        _queued("short", submitted=5, attained=2 * HOUR),  # level 1: before the long runs
        _queued("level2-new", submitted=3, attained=20 * HOUR),
        _queued("top-old", submitted=1, attained=150 * HOUR),
        _queued("level2-old", submitted=0, attained=30 * HOUR),
    ]

    def order(rules):
        held = 4  # the long runs hold their share of 8 GPUs already: nothing is owed
        ranked = rank_queue(
            jobs, rules, in_use={}, weights={}, share_in_use_gpus=held, capacity_gpus=8
        )
        return [d.job_id for d in ranked.order]

    assert order(RULES) == ["short", "level2-old", "top-old", "level2-new"]
    # With the share the top level's alone, level 2 goes before it by attained service.
    assert order(replace(RULES, share_levels=1)) == [
        "short",
        "level2-old",
        "level2-new",
        "top-old",
    ]
