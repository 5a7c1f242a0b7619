"""A job reference as people write it, turned into the job's id: the id itself,
a unique prefix of it (at least ``MIN_PREFIX`` characters), or a job name (the
newest job of that name). Every ``/v1/jobs/{job_id}...`` route resolves its
path through here (``api.job_refs``), so the API, the SDK, the CLI and the
dashboard all accept the same references.

Only the caller's projects are searched: a reference never matches, names or
counts a job the caller cannot see. An ambiguous reference is a conflict that
lists the candidates, so the caller can pick one."""

from __future__ import annotations

import re

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from trainplane.db.engine import read_only
from trainplane.db.models import Job, Project
from trainplane.errors import ConflictError
from trainplane.services.access import Caller

MIN_PREFIX = 6
# Job ids: 26 characters of lowercase Crockford base32 (trainplane.ids).
ID_LENGTH = 26
_ID_CHARS = re.compile(r"[0-9a-hjkmnp-tv-z]+")
# How many candidates an ambiguity error lists.
SHOWN_CANDIDATES = 10


def is_full_id(ref: str) -> bool:
    return len(ref) == ID_LENGTH and _ID_CHARS.fullmatch(ref) is not None


def resolve_job_ref(
    session: Session, caller: Caller, ref: str, *, project: str | None = None
) -> str:
    """The id ``ref`` stands for, among the jobs the caller sees (of
    ``project`` only, when given). In order: an exact id, a name (its newest
    job; a name used in several projects is ambiguous without ``project``),
    a unique id prefix. When nothing matches, ``ref`` itself, for the service
    that loads the job to answer "not found" as for any unknown id."""
    with read_only(session):
        scope = [caller.scope(Job.project_id)]
        if project is not None:
            scope.append(Job.project_id == _project_id(session, project))
        if session.scalar(select(Job.id).where(Job.id == ref, *scope)) is not None:
            return ref
        by_name = _newest_of_name(session, ref, scope)
        if by_name is not None:
            return by_name
        prefix = ref.lower()
        if len(prefix) < MIN_PREFIX or len(prefix) >= ID_LENGTH or not _ID_CHARS.fullmatch(prefix):
            return ref
        rows = session.execute(
            select(Job.id, Job.name, Project.name)
            .join(Project, Project.id == Job.project_id)
            .where(Job.id.startswith(prefix, autoescape=True), *scope)
            .order_by(Job.id.desc())
            .limit(SHOWN_CANDIDATES + 1)
        ).all()
        if len(rows) > 1:
            listed = ", ".join(
                f"{job_id} ({where}/{name})" for job_id, name, where in rows[:SHOWN_CANDIDATES]
            )
            more = " and more" if len(rows) > SHOWN_CANDIDATES else ""
            raise ConflictError(
                f"job id prefix '{ref}' is ambiguous: it matches {listed}{more}; "
                "give more characters of the id"
            )
        return rows[0][0] if rows else ref


def _project_id(session: Session, name: str) -> str | None:
    # An unknown project matches no job (None compares equal to no id), so a
    # project the caller cannot see looks like one without that job.
    return session.scalar(select(Project.id).where(Project.name == name))


def _newest_of_name(session: Session, name: str, scope: list[ColumnElement[bool]]) -> str | None:
    per_project = session.execute(
        select(Project.name, func.count(Job.id))
        .join(Project, Project.id == Job.project_id)
        .where(Job.name == name, *scope)
        .group_by(Project.name)
        .order_by(Project.name)
    ).all()
    if len(per_project) > 1:
        listed = ", ".join(f"{project} ({count} jobs)" for project, count in per_project)
        raise ConflictError(
            f"job name '{name}' is used in several projects: {listed}; "
            "name the project (--project, or ?project= over HTTP) or give the job's id"
        )
    if not per_project:
        return None
    return session.scalar(
        select(Job.id)
        .where(Job.name == name, *scope)
        .order_by(Job.created_at.desc(), Job.id.desc())
        .limit(1)
    )
