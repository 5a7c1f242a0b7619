"""Project secrets at rest: sealed under a key derived from the server key,
bound to their project and key, on both databases."""

from __future__ import annotations

import pytest
from pydantic import SecretStr
from sqlalchemy import select, update

from tests.factories import make_attempt, make_job, make_project, small_spec
from trainplane.db.access_models import ProjectSecret
from trainplane.errors import ConflictError
from trainplane.jobs.states import JobStatus
from trainplane.services import secrets
from trainplane.services.access import Caller
from trainplane.services.attempt_tokens import TokenKey, attempt_token
from trainplane.services.secret_box import SecretBox, SecretUnreadable

ADMIN = Caller.local_admin()


def test_a_sealed_value_opens_only_for_its_project_and_key_under_the_same_key():
    box = SecretBox(b"k" * 32)
    sealed = box.seal("p1", "hf", "value")
    assert box.open("p1", "hf", sealed) == "value"
    assert sealed != box.seal("p1", "hf", "value")  # a fresh nonce every time
    for project, key in (("p2", "hf"), ("p1", "other")):
        with pytest.raises(SecretUnreadable):
            box.open(project, key, sealed)
    with pytest.raises(SecretUnreadable, match="TRAINPLANE_SECRET_KEY"):
        SecretBox(b"j" * 32).open("p1", "hf", sealed)
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(SecretUnreadable):
        box.open("p1", "hf", tampered)
    with pytest.raises(SecretUnreadable, match="version"):
        box.open("p1", "hf", b"\x02" + sealed[1:])


def _attempt_of(session, project_id, secrets_used):
    spec = small_spec(gpus=1, entrypoint={"command": ["true"], "secrets": secrets_used})
    job = make_job(session, status=JobStatus.RUNNING, spec=spec, project_id=project_id)
    return job.id, make_attempt(session, job.id).id


def test_a_row_copied_onto_another_project_does_not_open_there(session):
    """Someone who can write the database but lacks the server key cannot move
    one project's secret to another project's jobs."""
    key = TokenKey(None)
    alpha, beta = make_project(session, "alpha"), make_project(session, "beta")
    secrets.set_secret(session, ADMIN, key, "alpha", "hf", "alpha-value")
    secrets.set_secret(session, ADMIN, key, "beta", "hf", "beta-value")
    job_id, attempt_id = _attempt_of(session, beta.id, {"HF_TOKEN": "hf"})
    token = attempt_token(key.get(session), attempt_id)

    def fetch():
        return secrets.attempt_secrets(
            session, key, job_id=job_id, attempt_id=attempt_id, token=token
        )

    assert fetch() == {"HF_TOKEN": "beta-value"}
    with session.begin():
        stolen = session.scalar(
            select(ProjectSecret.ciphertext).where(ProjectSecret.project_id == alpha.id)
        )
        session.execute(
            update(ProjectSecret)
            .where(ProjectSecret.project_id == beta.id)
            .values(ciphertext=stolen)
        )
    with pytest.raises(ConflictError, match="secret 'hf' cannot be read"):
        fetch()


def test_the_configured_server_key_seals_and_another_cannot_open(session):
    project = make_project(session, "alpha")
    configured = TokenKey(SecretStr("an-operator-chosen-secret-key-of-some-length"))
    secrets.set_secret(session, ADMIN, configured, "alpha", "hf", "v")
    job_id, attempt_id = _attempt_of(session, project.id, {"HF_TOKEN": "hf"})

    def fetch(key):
        token = attempt_token(key.get(session), attempt_id)
        return secrets.attempt_secrets(
            session, key, job_id=job_id, attempt_id=attempt_id, token=token
        )

    assert fetch(configured) == {"HF_TOKEN": "v"}
    # The installation's generated key is another key: the value is unreadable,
    # and the attempt is told to have it set again.
    with pytest.raises(ConflictError, match="set it again"):
        fetch(TokenKey(None))
