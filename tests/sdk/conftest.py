"""One real ``trainplane server`` (``--no-scheduler``, on its own PostgreSQL
database, with the bootstrap admin token) for the SDK's tests, and direct
access to its database for what only a scheduler or a runtime would write.

Nothing of it needs Ray: without a scheduler, jobs stay QUEUED until
cancelled. ``cluster_server`` is the exception: a server with its scheduler
on the local Ray cluster."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from tests.factories import make_attempt
from tests.fuzz.live_server import BOOTSTRAP_TOKEN, serve_database
from tests.scheduler.conftest import register_local
from trainplane.backends.local_ray import LocalRayHead
from trainplane.db import migrate
from trainplane.db.engine import make_engine, session_factory
from trainplane.db.models import JobAttempt, JobTracking
from trainplane.sdk.client import Client
from trainplane.services.attempt_tokens import TokenKey, attempt_token
from trainplane.testing.server import ServerProcess


@dataclass(frozen=True)
class LiveServer:
    url: str
    sessions: sessionmaker[Session]

    def start_attempt(self, job_id: str, *, log: str = "") -> str:
        """A RUNNING attempt of the job, as the scheduler would launch it,
        whose log so far is ``log``; returns the attempt id."""
        with self.sessions() as session:
            attempt_id = make_attempt(session, job_id).id
            with session.begin():
                session.execute(
                    update(JobAttempt).where(JobAttempt.id == attempt_id).values(log_tail=log)
                )
        return attempt_id

    def register_model(self, job_id: str, name: str, version: str) -> None:
        """Record the job as having registered ``name`` version ``version``,
        as the tracking loop does once MLflow has it."""
        with self.sessions() as session, session.begin():
            session.add(JobTracking(job_id=job_id, model_name=name, model_version=version))

    def report(self, method: str, job_id: str, attempt_id: str, path: str, body: Any) -> None:
        """``body`` sent to the attempt's runtime endpoint ``path``
        (``progress``, ``result``) as its runtime sends it, with its token."""
        with self.sessions() as session:
            token = attempt_token(TokenKey(None).get(session), attempt_id)
        answer = httpx.request(
            method,
            f"{self.url}/v1/jobs/{job_id}/attempts/{attempt_id}/{path}",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert answer.is_success, answer.text


@pytest.fixture(scope="package")
def live_server(
    postgres_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    database_url = postgres_server.create_database("tp_sdk")
    engine = make_engine(database_url)
    try:
        with serve_database(database_url, tmp_path_factory.mktemp("sdk-home")) as url:
            yield LiveServer(url, session_factory(engine))
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def admin(live_server: LiveServer) -> Iterator[Client]:
    with Client(live_server.url, BOOTSTRAP_TOKEN) as client:
        yield client


@pytest.fixture(scope="module")
def project(admin: Client) -> str:
    """A project of this module's own, so modules do not see each other's jobs."""
    return admin.create_project(f"sdk-{uuid.uuid4().hex[:8]}").name


def spec(name: str, project: str, **fields: Any) -> dict[str, Any]:
    return {
        "kind": "train",
        "name": name,
        "project": project,
        "entrypoint": {"command": ["python", "-c", "print('hi')"]},
        "resources": {"gpus": 1},
        **fields,
    }


# The tests that run decorated functions: a server with its scheduler, on the
# session's local Ray cluster (2 CPU worker slots). Asking for ray_head marks
# them as cluster tests.
@pytest.fixture(scope="package")
def cluster_server(
    ray_head: LocalRayHead, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    home = tmp_path_factory.mktemp("sdk-cluster-server")
    db = f"sqlite:///{home / 'trainplane.db'}"
    migrate.upgrade(db)
    register_local(db, ray_head.address)
    env = {
        "TRAINPLANE_DATABASE_URL": db,
        "TRAINPLANE_HOME": str(home),
        "TRAINPLANE_SCHEDULER_POLL_SECONDS": "0.5",
    }
    with ServerProcess(env, log_path=home / "server.log").start() as process:
        yield process.url
