"""``/v1/projects``."""

from __future__ import annotations


def test_create_and_list(api):
    response = api.post("/v1/projects", json={"name": "vision", "description": "CV team"})
    assert response.status_code == 201
    names = [p["name"] for p in api.get("/v1/projects").json()["items"]]
    assert names == ["default", "vision"]


def test_duplicate_is_409(api):
    assert api.post("/v1/projects", json={"name": "nlp"}).status_code == 201
    response = api.post("/v1/projects", json={"name": "nlp"})
    assert response.status_code == 409
    assert "nlp" in response.json()["detail"]


def test_invalid_name_is_422(api):
    response = api.post("/v1/projects", json={"name": "Bad Name"})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "name"


def test_jobs_can_be_submitted_to_a_new_project(api):
    api.post("/v1/projects", json={"name": "vision"})
    spec = {"kind": "train", "name": "j", "project": "vision", "entrypoint": {"command": ["true"]}}
    response = api.post("/v1/jobs", json=spec)
    assert response.status_code == 201
    assert response.json()["project"] == "vision"
