"""Every ``/v1/jobs/{job_id}...`` route takes a job name or a unique id prefix
for the id: 409 listing the candidates when ambiguous, 404 for a job of a
project the caller cannot see."""

from __future__ import annotations

from fastapi.testclient import TestClient
from pydantic import SecretStr

from tests.factories import small_spec
from trainplane.api.app import create_app

ROOT = "root-secret-for-job-refs"


def test_name_and_prefix_stand_for_the_id_on_every_job_route(settings):
    secured = settings.model_copy(update={"bootstrap_token": SecretStr(ROOT)})
    root = {"Authorization": f"Bearer {ROOT}"}
    with TestClient(create_app(secured), headers=root) as api:
        for project in ("alpha", "beta"):
            assert api.post("/v1/projects", json={"name": project}).status_code == 201
        first = api.post("/v1/jobs", json=small_spec("mlp-ddp", project="alpha")).json()
        latest = api.post("/v1/jobs", json=small_spec("mlp-ddp", project="alpha")).json()
        api.post("/v1/jobs", json=small_spec("mlp-ddp", project="beta"))
        by_name = api.get("/v1/jobs/mlp-ddp", params={"project": "alpha"})
        assert by_name.status_code == 200, by_name.text
        assert by_name.json()["id"] == latest["id"]
        prefix = first["id"][:12]
        assert api.get(f"/v1/jobs/{prefix}").json()["id"] == first["id"]
        for route in ("events", "metrics", "checkpoints", "logs"):
            answer = api.get(f"/v1/jobs/{prefix}/{route}")
            assert answer.status_code == 200, (route, answer.text)
        compared = api.get("/v1/jobs/compare", params={"ids": f"{prefix},{latest['id']}"})
        assert [j["id"] for j in compared.json()["jobs"]] == [first["id"], latest["id"]]
        ambiguous = api.get("/v1/jobs/mlp-ddp")
        assert ambiguous.status_code == 409
        assert "alpha" in ambiguous.json()["detail"] and "beta" in ambiguous.json()["detail"]
        cancelled = api.post(f"/v1/jobs/{prefix}/cancel")
        assert cancelled.json()["status"] == "CANCELLED"

        member = api.post("/v1/tokens", json={"name": "b", "project": "beta", "role": "member"})
        theirs = {"Authorization": f"Bearer {member.json()['token']}"}
        # beta's member sees beta's mlp-ddp only, and none of alpha's jobs.
        own = api.get("/v1/jobs/mlp-ddp", headers=theirs)
        assert own.status_code == 200 and own.json()["project"] == "beta"
        assert api.get(f"/v1/jobs/{prefix}", headers=theirs).status_code == 404
        hidden = api.get("/v1/jobs/mlp-ddp", params={"project": "alpha"}, headers=theirs)
        assert hidden.status_code == 404
        assert first["id"] not in hidden.text
