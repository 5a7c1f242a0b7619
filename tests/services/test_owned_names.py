"""Model names and MLflow experiments belong to the first project that uses
them, on both databases: refused for other projects at submit and plan (a
422 on the field), claimed in the job's own transaction, and won by exactly
one of two projects submitting at once."""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import select

from tests.factories import count_rows, make_project, small_spec
from trainplane.api.app import create_app
from trainplane.db.access_models import OwnedName
from trainplane.db.models import Project
from trainplane.errors import InvalidInputError
from trainplane.jobs.spec import parse_spec
from trainplane.services.access import Caller
from trainplane.services.file_access import FileAccess
from trainplane.services.jobs import submit_job

ROOT = "root-token-for-the-names-tests"


@pytest.fixture
def teams(settings, session):
    """The API with two projects, and a member token of each."""
    secured = settings.model_copy(update={"bootstrap_token": SecretStr(ROOT)})
    with TestClient(create_app(secured)) as client:
        root = {"Authorization": f"Bearer {ROOT}"}
        tokens = {}
        for project in ("alpha", "beta"):
            client.post("/v1/projects", json={"name": project}, headers=root)
            body = {"name": f"{project}-member", "project": project, "role": "member"}
            tokens[project] = client.post("/v1/tokens", json=body, headers=root).json()["token"]
        yield client, {p: {"Authorization": f"Bearer {t}"} for p, t in tokens.items()}


def _function_job(project, name, **extra):
    return small_spec(name, 1, project=project, entrypoint={"function": "os:getcwd"}, **extra)


def _owners(session):
    """Who owns what, leaving out the default project: a migrated database
    already holds its default experiment (the SQLite template is one)."""
    with session.begin():
        rows = session.execute(
            select(OwnedName.kind, OwnedName.name, Project.name)
            .join(Project, Project.id == OwnedName.project_id)
            .where(Project.name != "default")
        )
        return {(kind, name): project for kind, name, project in rows}


def test_another_projects_model_and_experiment_are_422_naming_the_field(teams, session):
    client, as_ = teams
    owner = _function_job("beta", "owner", register_model={"name": "team-model"})
    assert client.post("/v1/jobs", json=owner, headers=as_["beta"]).status_code == 201
    before = count_rows(session)
    for spec, field in [
        (
            _function_job("alpha", "thief", register_model={"name": "team-model"}),
            "register_model.name",
        ),
        (_function_job("alpha", "exp", tracking={"experiment": "beta"}), "tracking.experiment"),
    ]:
        for path in ("/v1/jobs", "/v1/jobs/plan"):
            refused = client.post(path, json=spec, headers=as_["alpha"])
            assert refused.status_code == 422, refused.text
            assert [e["field"] for e in refused.json()["errors"]] == [field]
            # The owner is not named: alpha's member cannot see beta.
            assert "another project" in refused.json()["detail"]
    assert count_rows(session) == before
    # The owner's own jobs go on using them.
    again = _function_job("beta", "again", register_model={"name": "team-model"})
    assert client.post("/v1/jobs", json=again, headers=as_["beta"]).status_code == 201
    assert _owners(session) == {("model", "team-model"): "beta", ("experiment", "beta"): "beta"}


def test_an_experiment_named_like_another_project_is_refused_before_that_project_used_it(
    teams, session
):
    client, as_ = teams
    spec = small_spec("exp", 1, project="alpha", tracking={"experiment": "beta"})
    refused = client.post("/v1/jobs", json=spec, headers=as_["alpha"])
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "tracking.experiment"
    # A name no project has is the first user's; its own default too.
    mine = small_spec("mine", 1, project="alpha", tracking={"experiment": "alpha-sweeps"})
    assert client.post("/v1/jobs", json=mine, headers=as_["alpha"]).status_code == 201
    assert client.post("/v1/jobs", json=small_spec("d", 1, project="beta"), headers=as_["beta"])
    assert _owners(session) == {
        ("experiment", "alpha-sweeps"): "alpha",
        ("experiment", "beta"): "beta",
    }
    taken = small_spec("late", 1, project="beta", tracking={"experiment": "alpha-sweeps"})
    assert client.post("/v1/jobs", json=taken, headers=as_["beta"]).status_code == 422


def test_a_project_cannot_be_created_under_an_experiment_another_project_owns(teams):
    client, as_ = teams
    spec = small_spec("exp", 1, project="alpha", tracking={"experiment": "gamma"})
    assert client.post("/v1/jobs", json=spec, headers=as_["alpha"]).status_code == 201
    root = {"Authorization": f"Bearer {ROOT}"}
    refused = client.post("/v1/projects", json={"name": "gamma"}, headers=root)
    assert refused.status_code == 409
    assert "experiment 'gamma'" in refused.json()["detail"]


def _race(sessions, access, model, projects) -> dict[str, str]:
    """Submit a job naming ``model`` from each project at the same moment:
    what became of each ("accepted" or the field of its 422)."""
    barrier = threading.Barrier(len(projects))
    outcomes: dict[str, str] = {}

    def submit(project: str) -> None:
        spec = parse_spec(_function_job(project, "racer", register_model={"name": model}))
        with sessions() as session:
            barrier.wait()
            try:
                submit_job(session, Caller.local_admin(), spec, access=access)
                outcomes[project] = "accepted"
            except InvalidInputError as exc:
                outcomes[project] = exc.field

    threads = [threading.Thread(target=submit, args=(p,)) for p in projects]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return outcomes


def test_two_projects_racing_for_a_name_do_not_both_win(settings, sessions):
    """Each round, a job of alpha and one of beta name the same new model at
    the same moment: one is accepted and owns it, the other gets a 422."""
    with sessions() as session:
        for project in ("alpha", "beta"):
            make_project(session, project)
    access = FileAccess.from_settings(settings)
    for round_number in range(6):
        model = f"contested-{round_number}"
        outcomes = _race(sessions, access, model, ["alpha", "beta"])
        assert sorted(outcomes.values()) == ["accepted", "register_model.name"], outcomes
        winner = next(p for p, o in outcomes.items() if o == "accepted")
        with sessions() as session:
            assert _owners(session)[("model", model)] == winner
