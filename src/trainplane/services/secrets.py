"""Project secrets: write-only values that a project's jobs receive as
environment variables (``entrypoint.secrets: {ENV_VAR: key}``).

A project admin (or an installation admin) sets and deletes them; members
list their keys and who set them when, never a value. Only a ciphertext is
stored (``services.secret_box``). The one way a value leaves the server is
:func:`attempt_secrets`: the runtime of a live attempt of a job that names the
secret asks for it with its attempt token, at launch, and puts it in the
environment of the processes it starts. So a value is in no API answer, event,
audit record, Ray job description, MLflow run or page.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from trainplane.db.access_models import ProjectSecret
from trainplane.db.base import upsert_insert, utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import Job, JobAttempt, Project
from trainplane.errors import ConflictError, InvalidInputError, NotFoundError
from trainplane.ids import new_id
from trainplane.jobs.entrypoints import wanted_secrets
from trainplane.jobs.environment import SECRET_KEY_PATTERN
from trainplane.jobs.spec import load_spec
from trainplane.jobs.states import LIVE_ATTEMPT_STATUSES
from trainplane.services import audit
from trainplane.services.access import Caller, Role
from trainplane.services.attempt_tokens import TokenKey, check_attempt_token
from trainplane.services.secret_box import SecretBox, SecretUnreadable

MAX_VALUE_BYTES = 64 * 1024
MAX_SECRETS_PER_PROJECT = 1000
_KEY = re.compile(SECRET_KEY_PATTERN)
_LIVE = [s.value for s in LIVE_ATTEMPT_STATUSES]


@dataclass(frozen=True)
class SecretInfo:
    """A secret as anyone may see it: everything but its value."""

    key: str
    created_at: datetime
    created_by: str
    updated_at: datetime
    updated_by: str


@dataclass(frozen=True)
class ProjectFacts:
    id: str
    name: str


def _project(session: Session, caller: Caller, name: str, role: Role, doing: str) -> ProjectFacts:
    """The project, once the caller holds ``role`` there. One the caller
    cannot see is a 404, the same whether or not it exists."""
    with read_only(session):
        row = session.execute(
            select(Project.id, Project.name).where(Project.name == name, caller.scope(Project.id))
        ).one_or_none()
    if row is None:
        raise NotFoundError(f"no project named '{name}'")
    caller.require(row.id, role, doing)
    return ProjectFacts(row.id, row.name)


def check_key(key: str) -> None:
    if not _KEY.fullmatch(key):
        raise InvalidInputError(
            "key",
            f"'{key[:140]}' is not a secret key: use 1-128 lowercase letters, digits, "
            "'.', '_' and '-', starting with a letter or digit",
        )


def check_value(value: str) -> None:
    if not value:
        raise InvalidInputError("value", "a secret cannot be empty")
    size = len(value.encode())
    if size > MAX_VALUE_BYTES:
        raise InvalidInputError(
            "value", f"a secret holds at most {MAX_VALUE_BYTES} bytes (this one has {size})"
        )
    if "\x00" in value:
        raise InvalidInputError("value", "an environment variable cannot hold a NUL character")


def _info(row: ProjectSecret) -> SecretInfo:
    return SecretInfo(row.key, row.created_at, row.created_by, row.updated_at, row.updated_by)


def set_secret(
    session: Session, caller: Caller, server_key: TokenKey, project: str, key: str, value: str
) -> tuple[SecretInfo, bool]:
    """Create or replace a secret; True when it is new. Jobs launched from
    now on get the new value; running attempts keep the one they started with."""
    check_key(key)
    check_value(value)
    facts = _project(session, caller, project, Role.ADMIN, "setting a project secret")
    sealed = SecretBox(server_key.get(session)).seal(facts.id, key, value)
    now = utcnow()
    with session.begin():
        existing = session.scalar(
            select(ProjectSecret.id).where(
                ProjectSecret.project_id == facts.id, ProjectSecret.key == key
            )
        )
        if existing is None:
            count = session.scalar(
                select(ProjectSecret.id)
                .where(ProjectSecret.project_id == facts.id)
                .offset(MAX_SECRETS_PER_PROJECT - 1)
                .limit(1)
            )
            if count is not None:
                raise ConflictError(
                    f"project {facts.name} has {MAX_SECRETS_PER_PROJECT} secrets, the most it "
                    "may have; delete one first"
                )
        # One statement whether or not another request created it meanwhile.
        session.execute(
            upsert_insert(session, ProjectSecret)
            .values(
                id=new_id(),
                project_id=facts.id,
                key=key,
                ciphertext=sealed,
                created_by=caller.subject,
                created_at=now,
                updated_by=caller.subject,
                updated_at=now,
            )
            .on_conflict_do_update(
                index_elements=[ProjectSecret.project_id, ProjectSecret.key],
                set_={"ciphertext": sealed, "updated_by": caller.subject, "updated_at": now},
            )
        )
        row = session.scalars(
            select(ProjectSecret).where(
                ProjectSecret.project_id == facts.id, ProjectSecret.key == key
            )
        ).one()
        created = existing is None
        audit.record(
            session,
            caller.subject,
            "secret.create" if created else "secret.update",
            project_id=facts.id,
            target=key,
        )
        info = _info(row)
    return info, created


def list_secrets(session: Session, caller: Caller, project: str) -> list[SecretInfo]:
    """Keys and who set them when, by key. Members may list them (they write
    the specs that name them); viewers may not."""
    facts = _project(session, caller, project, Role.MEMBER, "listing a project's secrets")
    with read_only(session):
        rows = session.scalars(
            select(ProjectSecret)
            .where(ProjectSecret.project_id == facts.id)
            .order_by(ProjectSecret.key)
        )
        return [_info(row) for row in rows]


def delete_secret(session: Session, caller: Caller, project: str, key: str) -> None:
    """Jobs that name it and have not launched yet will fail at launch, saying
    which secret is missing."""
    check_key(key)
    facts = _project(session, caller, project, Role.ADMIN, "deleting a project secret")
    with session.begin():
        gone = session.execute(
            delete(ProjectSecret).where(
                ProjectSecret.project_id == facts.id, ProjectSecret.key == key
            )
        )
        if gone.rowcount == 0:
            raise NotFoundError(f"project {facts.name} has no secret '{key}'")
        audit.record(session, caller.subject, "secret.delete", project_id=facts.id, target=key)


def check_secret_refs(
    session: Session, project_id: str, project_name: str, secrets: Mapping[str, str]
) -> None:
    """Refuse a spec naming a secret its project does not have. Run inside the
    transaction that inserts the job."""
    if not secrets:
        return
    known = set(
        session.scalars(
            select(ProjectSecret.key).where(
                ProjectSecret.project_id == project_id,
                ProjectSecret.key.in_(set(secrets.values())),
            )
        )
    )
    missing = sorted({key for key in secrets.values() if key not in known})
    if missing:
        listed = ", ".join(f"'{key}'" for key in missing)
        raise InvalidInputError(
            "entrypoint.secrets",
            f"project {project_name} has no secret {listed}; a project admin sets it with "
            f"`trainplane secrets set {project_name} {missing[0]}`",
        )


def attempt_secrets(
    session: Session, server_key: TokenKey, *, job_id: str, attempt_id: str, token: str | None
) -> dict[str, str]:
    """The environment variables of ``entrypoint.secrets`` with their values,
    for the runtime of a live attempt, authenticated by its attempt token.
    A secret deleted since the job was submitted is a ConflictError naming it."""
    key = server_key.get(session)
    # The token first: only the holder of an attempt's token learns anything.
    check_attempt_token(key, attempt_id, token)
    with read_only(session):
        row = session.execute(
            select(JobAttempt.status, Job.spec, Job.project_id, Project.name)
            .join(Job, Job.id == JobAttempt.job_id)
            .join(Project, Project.id == Job.project_id)
            .where(JobAttempt.id == attempt_id, JobAttempt.job_id == job_id)
        ).one_or_none()
        if row is None:
            raise NotFoundError(f"job {job_id} has no attempt {attempt_id}")
        if row.status not in _LIVE:
            raise ConflictError(f"attempt {attempt_id} has ended; its secrets are not handed out")
        wanted = wanted_secrets(load_spec(row.spec))
        sealed = dict(
            session.execute(
                select(ProjectSecret.key, ProjectSecret.ciphertext).where(
                    ProjectSecret.project_id == row.project_id,
                    ProjectSecret.key.in_(set(wanted.values())),
                )
            ).all()
        )
    missing = sorted({k for k in wanted.values() if k not in sealed})
    if missing:
        listed = ", ".join(f"'{k}'" for k in missing)
        raise ConflictError(
            f"entrypoint.secrets: project {row.name} has no secret {listed} any more "
            f"(deleted after the job was submitted); set it with `trainplane secrets set "
            f"{row.name} {missing[0]}` and submit the job again"
        )
    box = SecretBox(key)
    env = {}
    for variable, name in wanted.items():
        try:
            env[variable] = box.open(row.project_id, name, sealed[name])
        except SecretUnreadable as exc:
            raise ConflictError(
                f"entrypoint.secrets: project {row.name}'s secret '{name}' cannot be read: "
                f"{exc}; set it again"
            ) from None
    return env
