"""Job references (an id, a unique id prefix of 6+ characters, a name) turned
into ids, on PostgreSQL and SQLite, and over the API: ambiguity lists the
candidates, and a caller never resolves (or hears of) another project's job."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from tests.factories import insert_jobs, make_project
from trainplane.db.base import utcnow
from trainplane.db.models import Job
from trainplane.errors import ConflictError
from trainplane.services.access import Caller, Role
from trainplane.services.job_refs import resolve_job_ref


def _job(session, project_id: str, name: str, job_id: str, age_seconds: int = 0) -> str:
    (made,) = insert_jobs(
        session,
        1,
        project_id=project_id,
        name=name,
        created_at=utcnow() - timedelta(seconds=age_seconds),
    )
    with session.begin():
        session.execute(update(Job).where(Job.id == made).values(id=job_id))
    return job_id


@pytest.fixture
def jobs(session):
    """alpha: two runs of mlp-ddp (the older first), a sweep; beta: a job whose
    id shares alpha's prefix, and one named like alpha's sweep."""
    alpha, beta = make_project(session, "alpha"), make_project(session, "beta")
    ids = {
        "old": _job(session, alpha.id, "mlp-ddp", "01aaaaaa" + "0" * 18, age_seconds=60),
        "new": _job(session, alpha.id, "mlp-ddp", "01aaaaab" + "0" * 18),
        "sweep": _job(session, alpha.id, "lr-search", "01bbbbbb" + "0" * 18),
        "beta": _job(session, beta.id, "other", "01aaaaac" + "0" * 18),
        "beta-sweep": _job(session, beta.id, "lr-search", "01cccccc" + "0" * 18),
    }
    return alpha.id, beta.id, ids


def test_id_prefix_and_name_resolve_for_a_caller_of_the_project(session, jobs):
    alpha, _, ids = jobs
    member = Caller.with_grants("m", {alpha: Role.MEMBER})
    assert resolve_job_ref(session, member, ids["old"]) == ids["old"]
    assert resolve_job_ref(session, member, "01aaaaaa") == ids["old"]
    assert resolve_job_ref(session, member, "01AAAAAB") == ids["new"]  # any case
    assert resolve_job_ref(session, member, "mlp-ddp") == ids["new"]  # the newest
    assert resolve_job_ref(session, member, "lr-search") == ids["sweep"]
    # Nothing matches, or too short to be a prefix: unchanged, for a 404.
    assert resolve_job_ref(session, member, "01bbb") == "01bbb"
    assert resolve_job_ref(session, member, "nope") == "nope"


def test_an_ambiguous_prefix_or_name_is_a_conflict_listing_candidates(session, jobs):
    alpha, beta, ids = jobs
    member = Caller.with_grants("m", {alpha: Role.MEMBER})
    with pytest.raises(ConflictError) as raised:
        resolve_job_ref(session, member, "01aaaa")
    assert ids["old"] in raised.value.detail and ids["new"] in raised.value.detail
    assert "alpha/mlp-ddp" in raised.value.detail
    assert ids["beta"] not in raised.value.detail  # not the caller's to see
    both = Caller.with_grants("b", {alpha: Role.VIEWER, beta: Role.VIEWER})
    with pytest.raises(ConflictError, match=r"several projects: alpha \(1 jobs\), beta"):
        resolve_job_ref(session, both, "lr-search")
    assert resolve_job_ref(session, both, "lr-search", project="beta") == ids["beta-sweep"]


def test_another_projects_jobs_never_resolve(session, jobs):
    _, beta, ids = jobs
    outsider = Caller.with_grants("o", {beta: Role.MEMBER})
    assert resolve_job_ref(session, outsider, "mlp-ddp") == "mlp-ddp"
    assert resolve_job_ref(session, outsider, "01aaaaa") == ids["beta"]  # only its own
    assert resolve_job_ref(session, outsider, "lr-search") == ids["beta-sweep"]
    assert resolve_job_ref(session, outsider, "mlp-ddp", project="alpha") == "mlp-ddp"
