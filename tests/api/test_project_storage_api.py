"""Each project's storage root (``PATCH /v1/projects/{name}`` ``storage``): set
by an installation admin, shown by ``GET /v1/projects``, audited, and what a
job's folder, checkpoint.storage and checkpoint.resume must lie under. A
change applies to jobs submitted afterwards only. Real app, real databases."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from tests.factories import count_rows, small_spec
from trainplane.config import Settings
from trainplane.db.models import Job


def projects(api) -> dict[str, dict]:
    return {p["name"]: p for p in api.get("/v1/projects").json()["items"]}


def folder_of(session, job_id: str) -> str:
    with session.begin():
        return session.scalar(select(Job.folder).where(Job.id == job_id))


def submit(api, name: str, **fields):
    return api.post("/v1/jobs", json=small_spec(name, gpus=1, **fields))


def test_a_project_shows_its_default_root_until_an_admin_sets_one(api, settings: Settings):
    default = projects(api)["default"]
    assert default["storage"] is None
    assert default["storage_root"] == f"{settings.resolved_checkpoint_storage}/default"


def test_a_new_root_applies_to_jobs_submitted_afterwards(api, session, settings, tmp_path: Path):
    before = submit(api, "before").json()["id"]
    old_root = f"{settings.resolved_checkpoint_storage}/default"
    assert folder_of(session, before) == f"{old_root}/{before}"

    root = tmp_path / "team-storage" / "default"
    answer = api.patch("/v1/projects/default", json={"storage": str(root) + "/"})
    assert answer.status_code == 200, answer.text
    assert (answer.json()["storage"], answer.json()["storage_root"]) == (str(root), str(root))
    assert projects(api)["default"]["storage_root"] == str(root)

    after = submit(api, "after").json()["id"]
    assert folder_of(session, after) == f"{root}/{after}"
    assert folder_of(session, before) == f"{old_root}/{before}"  # fixed at submit
    # checkpoint.storage and resume now answer to the new root.
    assert submit(api, "in", checkpoint={"storage": str(root / "runs")}).status_code == 201
    refused = submit(api, "old", checkpoint={"resume": f"{old_root}/{before}/checkpoints/step-1"})
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "checkpoint.resume"

    action = api.get("/v1/audit").json()["items"][0]
    assert action["action"] == "project.update"
    assert str(root) in str(action) and "storage" in str(action)

    reset = api.patch("/v1/projects/default", json={"storage": None})
    assert reset.json()["storage"] is None and reset.json()["storage_root"] == old_root


def test_an_s3_root_is_accepted(api):
    answer = api.patch("/v1/projects/default", json={"storage": "s3://team-bucket/default"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["storage_root"] == "s3://team-bucket/default"


@pytest.mark.parametrize(
    ("storage", "words"),
    [
        ("relative/path", "absolute path"),
        ("ftp://host/x", "unsupported scheme"),
        ("{home}", "holds trainplane's own folder"),
        ("{tmp}", "holds trainplane's own folder"),
        ("{home}/elsewhere", "inside trainplane's own folder"),
        ("{storage}", "overlaps project beta"),
        ("{storage}/beta/sub", "overlaps project beta"),
        ("{tmp}/x/../y", "'..' segment"),
    ],
)
def test_a_root_that_would_reach_the_servers_or_another_projects_files_is_refused(
    api, session, settings, tmp_path, storage, words
):
    api.post("/v1/projects", json={"name": "beta"})
    storage = storage.format(
        home=settings.home, tmp=tmp_path, storage=settings.resolved_checkpoint_storage
    )
    answer = api.patch("/v1/projects/default", json={"storage": storage})
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["errors"]
    assert error["field"] == "storage" and words in error["message"]
    assert projects(api)["default"]["storage"] is None
    assert count_rows(session) == (0, 0)


def test_a_root_beside_the_default_ones_is_fine(api, settings):
    inside = f"{settings.resolved_checkpoint_storage}/teams/default"
    assert api.patch("/v1/projects/default", json={"storage": inside}).status_code == 200


def test_a_new_project_whose_default_root_another_project_holds_is_refused(api, settings):
    """A root set at <default storage>/zeta belongs to its project: creating a
    project zeta later would make that project's files zeta's."""
    taken = f"{settings.resolved_checkpoint_storage}/zeta"
    assert api.patch("/v1/projects/default", json={"storage": taken}).status_code == 200
    answer = api.post("/v1/projects", json={"name": "zeta"})
    assert answer.status_code == 409, answer.text
    assert "overlaps project default" in answer.json()["detail"]
    assert "zeta" not in projects(api)
    assert api.post("/v1/projects", json={"name": "eta"}).status_code == 201
