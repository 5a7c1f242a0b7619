"""The attempt decision table over every (finding, stop reason, job status,
attempt status) case, and the attempt transition table over every pair (pure)."""

from __future__ import annotations

import itertools
import string

import pytest

from trainplane.jobs.attempts import (
    ALL_FINDINGS,
    ATTEMPT_TRANSITIONS,
    ClusterFinding,
    Decision,
    RayJobStatus,
    StopReason,
    attempt_may_move,
    decide,
)
from trainplane.jobs.states import LIVE_ATTEMPT_STATUSES, AttemptStatus, JobStatus, is_allowed

A, S, F, R = AttemptStatus, JobStatus, ClusterFinding, RayJobStatus
ANY = None
CANCELLING = frozenset({S.CANCELLING})
NOT_CANCELLING = frozenset(S) - CANCELLING
STOPS: list[StopReason | None] = [None, *StopReason]
# A preemption uses no restart, even when its attempt's cluster is lost.
NOT_PREEMPTED = tuple(stop for stop in STOPS if stop is not StopReason.PREEMPTED)
PRUNED_BY_SWEEP = "{pruned}"  # the trial's pruned_reason
LIVE = [A.PENDING, A.SUBMITTED, A.RUNNING]

SILENT = "{where} stopped answering for {silence}: {message}"
FORGOTTEN = "{where} no longer knows the attempt (was its Ray head restarted?)"
RUNNING_ON = "running on {where}: {workers}"
STOPPED_AS = "stopped ({stop})"  # {stop}: the stop reason, or "outside trainplane"
KEEP = (None, "", None, "", False)

# Today's behaviour, first matching row wins. A row: (findings, stops, job
# statuses, attempt statuses) -> (attempt status, attempt reason, job status,
# job reason, uses a restart); ANY matches everything.
RULES: list[tuple[tuple, tuple]] = [
    ((F.LAUNCHED, ANY, ANY, A.PENDING), (A.SUBMITTED, "", None, "", False)),
    # A launch repeated for an attempt already further on moves nothing back.
    ((F.LAUNCHED, ANY, ANY, ANY), KEEP),
    (
        (F.REFUSED, ANY, CANCELLING, ANY),
        (A.FAILED, "{message}", S.CANCELLED, "cancelled before it started", False),
    ),
    (
        (F.REFUSED, ANY, ANY, ANY),
        (A.FAILED, "{message}", S.FAILED, "{where} refused the job: {message}", False),
    ),
    ((F.NO_ANSWER, ANY, ANY, ANY), KEEP),
    (
        (F.SILENT, ANY, CANCELLING, ANY),
        (A.LOST, SILENT, S.CANCELLED, "cancelled; " + SILENT, False),
    ),
    # A pruned trial ends whatever became of its cluster.
    (
        (F.SILENT, StopReason.PRUNED, NOT_CANCELLING, ANY),
        (A.LOST, SILENT, S.CANCELLED, PRUNED_BY_SWEEP, False),
    ),
    ((F.SILENT, NOT_PREEMPTED, ANY, A.RUNNING), (A.LOST, SILENT, S.RESTARTING, SILENT, True)),
    ((F.SILENT, ANY, ANY, ANY), (A.LOST, SILENT, S.QUEUED, "back in the queue: " + SILENT, False)),
    (
        (F.FORGOTTEN, ANY, CANCELLING, A.PENDING),
        (A.STOPPED, "stopped before launch", S.CANCELLED, "cancelled before it started", False),
    ),
    ((F.FORGOTTEN, ANY, ANY, A.PENDING), (A.STOPPED, "stopped before launch", None, "", False)),
    (
        (F.FORGOTTEN, ANY, CANCELLING, ANY),
        (A.LOST, FORGOTTEN, S.CANCELLED, "cancelled; " + FORGOTTEN, False),
    ),
    (
        (F.FORGOTTEN, StopReason.PRUNED, ANY, ANY),
        (A.LOST, FORGOTTEN, S.CANCELLED, PRUNED_BY_SWEEP, False),
    ),
    (
        (F.FORGOTTEN, NOT_PREEMPTED, ANY, A.RUNNING),
        (A.LOST, FORGOTTEN, S.RESTARTING, FORGOTTEN, True),
    ),
    (
        (F.FORGOTTEN, ANY, ANY, (A.SUBMITTED, A.RUNNING)),
        (A.LOST, FORGOTTEN, S.QUEUED, "back in the queue: " + FORGOTTEN, False),
    ),
    ((R.PENDING, ANY, ANY, ANY), KEEP),
    ((R.RUNNING, ANY, S.STARTING, A.RUNNING), (None, "", S.RUNNING, RUNNING_ON, False)),
    ((R.RUNNING, ANY, S.STARTING, ANY), (A.RUNNING, "", S.RUNNING, RUNNING_ON, False)),
    ((R.RUNNING, ANY, ANY, A.RUNNING), KEEP),
    ((R.RUNNING, ANY, ANY, ANY), (A.RUNNING, "", None, "", False)),
    (
        (R.SUCCEEDED, ANY, frozenset({S.STARTING, S.RUNNING, S.CANCELLING}), ANY),
        (A.SUCCEEDED, "succeeded", S.SUCCEEDED, "succeeded on {where}", False),
    ),
    ((R.SUCCEEDED, ANY, ANY, ANY), (A.SUCCEEDED, "succeeded", None, "", False)),
    (
        ((R.STOPPED, R.FAILED), StopReason.PREEMPTED, NOT_CANCELLING, ANY),
        (
            A.STOPPED,
            "preempted by {preemptor}",
            S.QUEUED,
            "preempted by {preemptor}; back in the queue, resumes from its latest checkpoint",
            False,
        ),
    ),
    # Pruned: stopped by itself after its checkpoint (exit 75, FAILED to Ray)
    # or at the end of the grace period; never retried.
    (
        ((R.STOPPED, R.FAILED), StopReason.PRUNED, NOT_CANCELLING, ANY),
        (A.STOPPED, "pruned", S.CANCELLED, PRUNED_BY_SWEEP, False),
    ),
    (
        ((R.STOPPED, R.FAILED), StopReason.STUCK, NOT_CANCELLING, ANY),
        (A.FAILED, "{stuck}", S.RESTARTING, "{stuck}", True),
    ),
    (
        (R.STOPPED, ANY, CANCELLING, ANY),
        (A.STOPPED, STOPPED_AS, S.CANCELLED, "cancelled; the attempt was stopped", False),
    ),
    (
        (R.STOPPED, StopReason.MAX_RUNTIME, ANY, ANY),
        (A.STOPPED, STOPPED_AS, S.FAILED, "exceeded max_runtime {max_runtime}; stopped", False),
    ),
    (
        (R.STOPPED, ANY, ANY, ANY),
        (
            A.STOPPED,
            STOPPED_AS,
            S.FAILED,
            "the Ray job was stopped outside trainplane on {where}",
            False,
        ),
    ),
    (
        (R.FAILED, ANY, CANCELLING, ANY),
        (A.FAILED, "{failure}", S.CANCELLED, "cancelled; the attempt ended", False),
    ),
    ((R.FAILED, ANY, ANY, ANY), (A.FAILED, "{failure}", S.RESTARTING, "{failure}", True)),
]


def _matches(pattern, value) -> bool:
    if pattern is ANY:
        return True
    if isinstance(pattern, tuple | frozenset):
        return value in pattern
    return value is pattern


def _expected(case) -> tuple[Decision, int]:
    for number, (pattern, (attempt, attempt_reason, job, job_reason, restart)) in enumerate(RULES):
        if all(_matches(p, v) for p, v in zip(pattern, case, strict=True)):
            stopped_as = f"stopped ({case[1] or 'outside trainplane'})"
            attempt_reason = attempt_reason.replace(STOPPED_AS, stopped_as)
            return Decision(attempt, attempt_reason, job, job_reason, restart), number
    raise AssertionError(f"no rule for {case}")


CASES = list(itertools.product(ALL_FINDINGS, STOPS, JobStatus, LIVE))


def _decide(case) -> Decision:
    found, stop, job, attempt = case
    return decide(found, stop=stop, job=job, attempt=attempt)


def test_every_case_decides_as_today():
    used_rules = set()
    wrong = []
    for case in CASES:
        expected, rule = _expected(case)
        used_rules.add(rule)
        if _decide(case) != expected:
            wrong.append((case, _decide(case), expected))
    assert not wrong, f"{len(wrong)} of {len(CASES)} cases differ, first: {wrong[0]}"
    assert len(CASES) == 10 * 6 * 8 * 3
    assert used_rules == set(range(len(RULES)))  # no rule is dead


def test_a_restart_is_used_exactly_when_the_retry_policy_is_asked():
    for case in CASES:
        decision = _decide(case)
        assert decision.uses_restart == (decision.job is S.RESTARTING), case


def test_only_an_attempt_that_ran_or_whose_ray_job_failed_uses_a_restart():
    for found, stop, job, attempt in CASES:
        decision = decide(found, stop=stop, job=job, attempt=attempt)
        if not decision.uses_restart:
            continue
        assert job is not S.CANCELLING
        assert decision.attempt in (A.FAILED, A.LOST)
        assert found in (F.SILENT, F.FORGOTTEN, R.STOPPED, R.FAILED)
        assert attempt is A.RUNNING or found in (R.STOPPED, R.FAILED)
        # A preempted attempt's end uses none; losing its cluster on the way still does.
        assert stop is not StopReason.PREEMPTED or found in (F.SILENT, F.FORGOTTEN)
        # A pruned trial is never retried, however it ends.
        assert stop is not StopReason.PRUNED


def test_a_pruned_trial_ends_cancelled_unless_it_succeeded_first():
    for found, job, attempt in itertools.product((R.STOPPED, R.FAILED), NOT_CANCELLING, LIVE):
        decision = decide(found, stop=StopReason.PRUNED, job=job, attempt=attempt)
        assert (decision.attempt, decision.job) == (A.STOPPED, S.CANCELLED)
        assert decision.job_reason == PRUNED_BY_SWEEP
    # The truth wins: a trial that finished before its stop took effect succeeded.
    ended = decide(R.SUCCEEDED, stop=StopReason.PRUNED, job=S.RUNNING, attempt=A.RUNNING)
    assert (ended.attempt, ended.job) == (A.SUCCEEDED, S.SUCCEEDED)
    # Cancelling the sweep meanwhile: the cancel wins.
    both = decide(R.FAILED, stop=StopReason.PRUNED, job=S.CANCELLING, attempt=A.RUNNING)
    assert (both.job, both.job_reason) == (S.CANCELLED, "cancelled; the attempt ended")


def test_every_attempt_change_is_in_the_transition_table():
    for case in CASES:
        decision = _decide(case)
        if decision.attempt is not None:
            assert attempt_may_move(case[3], decision.attempt), case
            assert bool(decision.attempt_reason) == (decision.attempt not in LIVE), case


def test_job_changes_are_allowed_from_the_statuses_a_live_attempt_has():
    # A live attempt's job is STARTING, RUNNING or CANCELLING; from other
    # statuses set_status refuses the change and the scheduler looks again.
    for found, stop, job, attempt in CASES:
        if job not in (S.STARTING, S.RUNNING, S.CANCELLING):
            continue
        decision = decide(found, stop=stop, job=job, attempt=attempt)
        if decision.job is not None:
            assert is_allowed(job, decision.job), (found, stop, job, attempt, decision)
            if decision.uses_restart:  # the retry policy may fail it instead
                assert is_allowed(job, S.FAILED)


def test_reasons_name_only_facts_the_scheduler_knows():
    facts = {"where", "message", "silence", "workers", "preemptor", "stuck", "failure"}
    facts |= {"max_runtime", "pruned"}
    for case in CASES:
        decision = _decide(case)
        for template in (decision.attempt_reason, decision.job_reason):
            named = {field for _, field, _, _ in string.Formatter().parse(template) if field}
            assert named <= facts, (case, template)


@pytest.mark.parametrize("status", list(AttemptStatus))
def test_ended_attempts_are_never_changed(status):
    if status in LIVE_ATTEMPT_STATUSES:
        return
    for found, stop, job in itertools.product(ALL_FINDINGS, STOPS, JobStatus):
        assert decide(found, stop=stop, job=job, attempt=status) == Decision()


# --- the attempt transition table -----------------------------------------------------

ORDER = {A.PENDING: 0, A.SUBMITTED: 1, A.RUNNING: 2}  # ended statuses come after all


def test_every_attempt_status_has_a_row():
    assert set(ATTEMPT_TRANSITIONS) == set(AttemptStatus)


def test_every_pair_of_attempt_statuses():
    """Attempts only move forward: pending, submitted, running, then one end."""
    for current, target in itertools.product(AttemptStatus, AttemptStatus):
        forward = current in ORDER and ORDER.get(target, 3) > ORDER[current]
        assert attempt_may_move(current, target) == forward, (current, target)


def test_ray_job_statuses_that_end_a_job():
    assert {s for s in RayJobStatus if s.ended} == {R.STOPPED, R.SUCCEEDED, R.FAILED}
    assert RayJobStatus("RUNNING") is R.RUNNING  # the Jobs API's strings parse
