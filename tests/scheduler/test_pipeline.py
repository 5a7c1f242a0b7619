"""The leased loops' skeleton (scheduler.pipeline) on a real database, with the
scheduler's own claim and apply: batches, the lease token guard, and what a
failing work step leaves behind. No cluster: the work step says what a launch
would have."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy.orm import Session, sessionmaker

from tests.factories import insert_jobs, job_attempts, make_cluster, small_spec
from trainplane.db.base import utcnow
from trainplane.jobs.states import AttemptStatus
from trainplane.scheduler.pipeline import LoopSettings, Pipeline
from trainplane.services import attempts as attempt_service
from trainplane.services.attempts import Applied, AttemptWork, Launched, Outcome
from trainplane.services.placement import place_queued_jobs

LOOP = LoopSettings(batch=1, threads=2, lease_seconds=30)

pytestmark = pytest.mark.ray_free  # a real database, no cluster


def _claim(session: Session, loop: LoopSettings) -> list[AttemptWork]:
    return attempt_service.claim_attempts(
        session, utcnow(), lease_seconds=loop.lease_seconds, limit=loop.batch
    )


def _apply(session: Session, work: AttemptWork, outcome: Outcome) -> Applied | None:
    return attempt_service.apply_outcome(
        session,
        work,
        outcome,
        utcnow(),
        poll_seconds=60,
        starting_poll_seconds=60,  # looked at again next minute: not in these passes
        lost_after_seconds=60,
    )


def _pipeline(
    sessions: sessionmaker[Session],
    work: Callable[[AttemptWork], Outcome],
    **parts: object,
) -> Pipeline[AttemptWork, Outcome, Applied]:
    return Pipeline(
        sessions,
        LOOP,
        name="test",
        claim=_claim,
        work=work,
        apply=_apply,
        describe=lambda work: f"attempt {work.attempt_id}",
        **parts,  # type: ignore[arg-type]
    )


def _placed_jobs(session: Session, count: int) -> list[str]:
    make_cluster(session, gpus=2 * count)
    job_ids = insert_jobs(session, count, spec=small_spec(gpus=2))
    assert len(place_queued_jobs(session, utcnow()).placed) == count
    return job_ids


def _attempt(session: Session, job_id: str):
    (attempt,) = job_attempts(session, job_id)
    return attempt


def test_a_pass_claims_a_batch_works_it_and_applies_each_result(session, sessions):
    job_ids = _placed_jobs(session, 2)
    pipeline = _pipeline(sessions, lambda work: Launched(new=True))
    try:
        first = pipeline.run_once()
        second = pipeline.run_once()
        assert pipeline.run_once() == []  # both are due again only after the poll delay
    finally:
        pipeline.shutdown()
    assert len(first) == len(second) == 1  # batch 1
    assert {first[0].work.job_id, second[0].work.job_id} == set(job_ids)
    for done in (*first, *second):
        assert isinstance(done.applied, Applied)
        attempt = _attempt(session, done.work.job_id)
        assert attempt.status == AttemptStatus.SUBMITTED.value and attempt.lease_token is None


def test_a_result_whose_lease_was_taken_over_is_not_applied(session, sessions):
    (job_id,) = _placed_jobs(session, 1)
    taken: list[AttemptWork] = []

    def slow_launch(work: AttemptWork) -> Outcome:
        # The launch outlasts the lease: another scheduler claims the attempt.
        later = utcnow() + timedelta(seconds=LOOP.lease_seconds + 1)
        with sessions() as other:
            taken.extend(attempt_service.claim_attempts(other, later, lease_seconds=30, limit=1))
        return Launched(new=True)

    pipeline = _pipeline(sessions, slow_launch)
    try:
        (done,) = pipeline.run_once()
    finally:
        pipeline.shutdown()
    assert done.applied is None
    (other,) = taken
    attempt = _attempt(session, job_id)
    assert attempt.status == AttemptStatus.PENDING.value
    assert attempt.lease_token == other.lease_token != done.work.lease_token


def _broken(work: AttemptWork) -> Outcome:
    raise RuntimeError("a bug")


def test_a_failing_work_step_applies_nothing_and_leaves_the_lease_to_run_out(session, sessions):
    (job_id,) = _placed_jobs(session, 1)
    pipeline = _pipeline(sessions, _broken)
    try:
        (done,) = pipeline.run_once()
        assert pipeline.run_once() == []  # still leased
    finally:
        pipeline.shutdown()
    assert done.applied is None
    attempt = _attempt(session, job_id)
    assert attempt.status == AttemptStatus.PENDING.value
    assert attempt.lease_token == done.work.lease_token
    later = utcnow() + timedelta(seconds=LOOP.lease_seconds + 1)
    (again,) = attempt_service.claim_attempts(session, later, lease_seconds=30, limit=1)
    assert again.attempt_id == done.work.attempt_id


def test_a_loop_may_turn_a_failing_work_step_into_a_result_to_apply(session, sessions):
    (job_id,) = _placed_jobs(session, 1)
    pipeline = _pipeline(
        sessions, _broken, failed=lambda work, exc: Launched(new="bug" in str(exc))
    )
    try:
        (done,) = pipeline.run_once()
    finally:
        pipeline.shutdown()
    assert isinstance(done.applied, Applied) and done.applied.notes == []  # new=True
    attempt = _attempt(session, job_id)
    assert attempt.status == AttemptStatus.SUBMITTED.value and attempt.lease_token is None
