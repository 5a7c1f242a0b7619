"""Code bundles: uploaded by project members, named by jobs' ``entrypoint.code``,
read back by the scheduler when it launches such a job, and deleted once no
unfinished job names them and nobody has used them for the retention period."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from trainplane.code_bundles import BundleError, check_bundle
from trainplane.db.base import utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import CodeBundle, Job, Project
from trainplane.errors import InvalidInputError, NotFoundError
from trainplane.ids import new_id
from trainplane.jobs.spec import FinetuneSpec, TrainSpec
from trainplane.jobs.states import TERMINAL_STATUSES
from trainplane.services.access import Caller, Role


@dataclass(frozen=True)
class BundleView:
    digest: str
    project: str
    size_bytes: int
    files: int
    created_at: datetime


@dataclass(frozen=True)
class Upload:
    bundle: BundleView
    created: bool


def upload_bundle(session: Session, caller: Caller, project_name: str, data: bytes) -> Upload:
    try:
        summary = check_bundle(data)
    except BundleError as exc:
        raise InvalidInputError("body", str(exc)) from None
    try:
        with session.begin():
            project = _visible_project(session, caller, project_name)
            caller.require(project.id, Role.MEMBER, "uploading code")
            existing = _find(session, project.id, summary.digest)
            if existing is not None:
                existing.last_used_at = utcnow()
                return Upload(_view(existing, project.name), created=False)
            now = utcnow()
            row = CodeBundle(
                id=new_id(),
                project_id=project.id,
                digest=summary.digest,
                size_bytes=summary.size_bytes,
                files=summary.files,
                content=data,
                created_by=caller.subject,
                created_at=now,
                last_used_at=now,
            )
            session.add(row)
            session.flush()
            return Upload(_view(row, project.name), created=True)
    except IntegrityError:
        pass  # the same bytes, uploaded to the project at the same moment: theirs stands
    with read_only(session):
        project = _visible_project(session, caller, project_name)
        winner = _find(session, project.id, summary.digest)
        if winner is None:
            raise NotFoundError(f"bundle {summary.digest} vanished while it was uploaded")
        return Upload(_view(winner, project.name), created=False)


def get_bundle(session: Session, caller: Caller, project_name: str, digest: str) -> BundleView:
    with read_only(session):
        project = _visible_project(session, caller, project_name)
        row = _find(session, project.id, digest)
        if row is None:
            raise NotFoundError(f"project '{project_name}' has no bundle {digest}")
        return _view(row, project.name)


def check_spec_code(
    session: Session, spec: TrainSpec | FinetuneSpec, *, used_at: datetime | None = None
) -> None:
    """For submission and plans, once the caller's access to the project is
    checked: ``entrypoint.code`` must name a bundle of the job's project. A
    submission passes ``used_at``, which keeps the bundle from the sweep."""
    entrypoint = getattr(spec, "entrypoint", None)
    if entrypoint is None or entrypoint.code is None:
        return
    project_name, digest = spec.project, entrypoint.code
    found = session.scalar(
        select(CodeBundle.id)
        .join(Project, Project.id == CodeBundle.project_id)
        .where(Project.name == project_name, CodeBundle.digest == digest)
    )
    if found is None:
        raise InvalidInputError(
            "entrypoint.code",
            f"project '{project_name}' has no bundle {digest}; upload it first with "
            f"POST /v1/projects/{project_name}/bundles",
        )
    if used_at is not None:
        session.execute(
            update(CodeBundle).where(CodeBundle.id == found).values(last_used_at=used_at)
        )


def bundle_content(session: Session, project_name: str, digest: str) -> bytes | None:
    """The bundle's bytes, for the scheduler (no caller: it launches any job)."""
    with read_only(session):
        return session.scalar(
            select(CodeBundle.content)
            .join(Project, Project.id == CodeBundle.project_id)
            .where(Project.name == project_name, CodeBundle.digest == digest)
        )


def delete_unused_bundles(session: Session, now: datetime, retention: timedelta) -> int:
    """Deletes the bundles last used before ``now - retention`` that no
    unfinished job names (a queued or restarting job launches from its
    bundle again); returns how many went. A submission that names one of them
    meanwhile refreshes its ``last_used_at``, and the delete's own condition
    on it keeps that bundle."""
    cutoff = now - retention
    with session.begin():
        stale = session.execute(
            select(CodeBundle.id, CodeBundle.project_id, CodeBundle.digest).where(
                CodeBundle.last_used_at < cutoff
            )
        ).all()
        if not stale:
            return 0
        named = {
            # A sweep's trials to come launch from its template's bundle.
            (project_id, ((spec.get("trial") or spec).get("entrypoint") or {}).get("code"))
            for project_id, spec in session.execute(
                select(Job.project_id, Job.spec).where(
                    Job.status.not_in([status.value for status in TERMINAL_STATUSES]),
                    Job.project_id.in_({row.project_id for row in stale}),
                )
            )
        }
        unused = [row.id for row in stale if (row.project_id, row.digest) not in named]
        if not unused:
            return 0
        deleted = session.execute(
            delete(CodeBundle).where(CodeBundle.id.in_(unused), CodeBundle.last_used_at < cutoff)
        )
        return deleted.rowcount or 0


def _visible_project(session: Session, caller: Caller, name: str) -> Project:
    project = session.scalar(select(Project).where(Project.name == name, caller.scope(Project.id)))
    if project is None:
        raise NotFoundError(f"no project named '{name}'")
    return project


def _find(session: Session, project_id: str, digest: str) -> CodeBundle | None:
    return session.scalar(
        select(CodeBundle).where(CodeBundle.project_id == project_id, CodeBundle.digest == digest)
    )


def _view(row: CodeBundle, project: str) -> BundleView:
    return BundleView(
        digest=row.digest,
        project=project,
        size_bytes=row.size_bytes,
        files=row.files,
        created_at=row.created_at,
    )
