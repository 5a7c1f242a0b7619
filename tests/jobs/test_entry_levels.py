"""Entry levels: a job whose project's earlier jobs of its GPU count mostly
reached the top level enters there; past its first level it then stands,
queued or running, as the top level's jobs do."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainplane.jobs.entry_levels import PeerHistory, entry_level, entry_note, reached_top
from trainplane.jobs.placement import Demand
from trainplane.jobs.service_queues import (
    HOUR,
    HeldJob,
    QueuedJob,
    ServiceRules,
    rank_queue,
    service_level,
    share_in_use,
    shield_top_share,
    standing,
)

RULES = ServiceRules()
TOP = RULES.top_level


def test_a_job_reached_the_top_level_from_the_top_threshold_on():
    assert not reached_top(99.9 * HOUR, RULES)
    assert reached_top(100 * HOUR, RULES)


@pytest.mark.parametrize(
    ("outcomes", "level"),
    [
        ([], 0),  # nothing known
        ([True] * 4, 0),  # fewer than entry_min_peers (5)
        ([True] * 5, TOP),
        ([True, False] * 3, TOP),  # half reached it: enough
        ([True, True, False, False, False], 0),  # two of five: not
        ([False] * 95 + [True] * 50, 0),  # only the latest 100 count: 5 of 100
        ([True] * 60 + [False] * 400, TOP),  # 60 of the latest 100
    ],
)
def test_the_top_level_when_at_least_the_fraction_of_enough_peers_reached_it(outcomes, level):
    assert entry_level(outcomes, RULES) == level


def test_a_fraction_of_zero_turns_entry_levels_off():
    assert entry_level([True] * 10, replace(RULES, entry_top_fraction=0.0)) == 0
    assert (
        entry_level([True, False, False], replace(RULES, entry_min_peers=3, entry_top_fraction=0.3))
        == TOP
    )


def test_the_history_keeps_each_project_and_width_apart_and_the_latest_first():
    history = PeerHistory(replace(RULES, entry_peers=5))
    for _ in range(5):
        history.add("a", 8, 200 * HOUR)
    assert history.entry_level("a", 8) == TOP
    assert history.entry_level("a", 4) == 0  # another width: no peers
    assert history.entry_level("b", 8) == 0  # another project: no peers
    for _ in range(3):  # three short runs push out three long ones: 2 of 5
        history.add("a", 8, 2 * HOUR)
    assert history.entry_level("a", 8) == 0


def test_the_note_says_how_many_peers_reached_the_top_level():
    note = entry_note([True, True, False], 8, RULES)
    assert "2 of its project's latest 3 finished 8-GPU jobs held 100 GPU-hours or more" in note


def _queued(job_id, *, submitted, attained=0.0, entry=0, project="a", gpus=8):
    return QueuedJob(
        Demand(job_id, gpus, project_id=project),
        50,
        submitted,
        attained,
        entry_level=entry,
    )


def test_an_entered_job_is_ordered_with_the_top_level_first_come_first_served():
    jobs = [
        _queued("climbed-newer", submitted=30.0, attained=500 * HOUR, project="b"),
        _queued("entered", submitted=20.0, attained=2 * HOUR, entry=TOP),
        _queued("climbed-older", submitted=10.0, attained=500 * HOUR, project="c"),
        _queued("short", submitted=40.0, project="d"),
    ]
    # The top level holds its share: the lower levels go first, then the
    # top level by submit time, the entered job among the climbed ones.
    ranked = rank_queue(jobs, RULES, in_use={}, weights={}, share_in_use_gpus=32, capacity_gpus=64)
    assert [d.job_id for d in ranked.order] == [
        "short",
        "climbed-older",
        "entered",
        "climbed-newer",
    ]
    assert ranked.standing["entered"] == (50, 0, -TOP, -20.0)
    # Not entered, the same job is the only one at level 1.
    plain = rank_queue(
        [replace(j, entry_level=0) for j in jobs],
        RULES,
        in_use={},
        weights={},
        share_in_use_gpus=32,
        capacity_gpus=64,
    )
    assert [d.job_id for d in plain.order][:2] == ["short", "entered"]


def test_below_the_first_threshold_an_entered_job_is_at_the_lowest_level():
    """A quick run of a project of long runs is not kept waiting with them."""
    assert service_level(0.99 * HOUR, RULES, TOP) == 0
    assert service_level(HOUR, RULES, TOP) == TOP
    assert standing(50, 0.0, RULES, submitted=1.0, entry_level=TOP) == standing(
        50, 0.0, RULES, submitted=1.0
    )
    ranked = rank_queue(
        [
            _queued("quick", submitted=20.0, entry=TOP),
            _queued("short", submitted=40.0, project="d"),
        ],
        RULES,
        in_use={},
        weights={},
        share_in_use_gpus=32,
        capacity_gpus=64,
    )
    assert [d.job_id for d in ranked.order] == ["quick", "short"]


def test_a_running_entered_job_counts_in_the_top_levels_share_and_is_shielded_by_it():
    entered = HeldJob(
        "entered",
        8,
        5.0,
        2 * HOUR,
        standing(50, 2 * HOUR, RULES, submitted=5.0, entry_level=TOP),
        entry_level=TOP,
    )
    assert entered.level(RULES) == TOP
    assert share_in_use([entered], RULES) == 8
    newcomer = standing(50, 0.0, RULES, submitted=40.0)
    # Outside the share, a newcomer of the lowest level may stop it (as any
    # top-level job); within the share it stands as the lowest level does.
    assert newcomer > entered.standing
    assert shield_top_share([entered], RULES, capacity_gpus=16)["entered"] == (50, 0, 0, 0.0)
    assert shield_top_share([entered], RULES, capacity_gpus=8)["entered"] == entered.standing
