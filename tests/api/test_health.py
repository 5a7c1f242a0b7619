"""``/healthz`` and ``/readyz``."""

from __future__ import annotations

from fastapi.testclient import TestClient

from trainplane.api.app import create_app
from trainplane.config import Settings


def test_healthz(api):
    assert api.get("/healthz").json() == {"status": "ok", "checks": {}}


def test_readyz_with_the_database_up(api):
    response = api.get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "schema": "ok"}


def test_readyz_is_503_when_the_schema_is_not_migrated(tmp_path):
    settings = Settings(
        home=tmp_path, database_url=f"sqlite:///{tmp_path}/empty.db", auto_migrate=False
    )
    with TestClient(create_app(settings)) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    assert "trainplane db upgrade" in response.json()["checks"]["schema"]
    assert response.headers["retry-after"]


def test_readyz_is_503_when_the_database_is_unreachable(tmp_path):
    from trainplane.net import free_port

    url = f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/none"
    settings = Settings(home=tmp_path, database_url=url, auto_migrate=False)
    with TestClient(create_app(settings)) as client:
        response = client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["checks"]["database"].startswith("unavailable")
        jobs = client.get("/v1/jobs")
        assert jobs.status_code == 503
        assert jobs.headers["retry-after"]
