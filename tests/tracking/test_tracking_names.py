"""The tracking loop writes only to its project's own experiment and model,
against a real MLflow store, on both databases: a job (even one submitted
before names were owned) naming another project's experiment or model gets
an error saying why, and nothing of it reaches MLflow. A name no one owns yet
is checked against MLflow's own project tags before the job's project claims it."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tests.factories import make_project
from tests.tracking.conftest import Jobs
from tests.tracking.test_tracking_loop import run_pass, tracking_row
from trainplane.db.access_models import OwnedName
from trainplane.db.base import utcnow
from trainplane.db.models import Project
from trainplane.jobs.states import JobStatus

pytestmark = pytest.mark.usefixtures("one_rank_group")


def own(sessions: sessionmaker[Session], kind: str, name: str, project: str) -> None:
    """``project`` (created if need be) owns the name, as a submit would record."""
    with sessions() as session:
        with session.begin():
            found = session.scalar(select(Project.id).where(Project.name == project))
        project_id = found or make_project(session, project).id
        with session.begin():
            session.add(OwnedName(kind=kind, name=name, project_id=project_id, created_at=utcnow()))


def owner(sessions: sessionmaker[Session], kind: str, name: str) -> str | None:
    with sessions() as session, session.begin():
        return session.scalar(
            select(Project.name)
            .join(OwnedName, OwnedName.project_id == Project.id)
            .where(OwnedName.kind == kind, OwnedName.name == name)
        )


def test_another_projects_experiment_gets_no_run_and_the_job_says_why(
    jobs: Jobs, sessions, tracking_settings, mlflow_client
):
    own(sessions, "experiment", jobs.experiment, "beta")
    job_id, attempt_id = jobs.running()
    jobs.report(job_id, attempt_id, range(1, 4), lambda step: 1.0 / step)
    run_pass(tracking_settings, sessions)
    row = tracking_row(sessions, job_id)
    assert row.run_id is None and row.finished_at is not None  # refused for good
    assert f"MLflow experiment '{jobs.experiment}' belongs to another project" in row.error
    assert mlflow_client.get_experiment_by_name(jobs.experiment) is None


def test_another_projects_model_gets_no_version_while_the_run_closes(
    jobs: Jobs, sessions, tracking_settings, mlflow_client
):
    own(sessions, "model", jobs.model, "beta")
    job_id, _ = jobs.running()
    jobs.export(job_id)
    jobs.end(job_id, JobStatus.SUCCEEDED)
    run_pass(tracking_settings, sessions)
    row = tracking_row(sessions, job_id)
    assert row.finished_at is not None and row.model_version is None
    assert f"model '{jobs.model}' belongs to another project" in row.error
    assert mlflow_client.get_run(row.run_id).info.status == "FINISHED"
    assert mlflow_client.search_model_versions(f"name = '{jobs.model}'") == []


def test_names_from_before_ownership_are_checked_against_mlflows_project_tags(
    jobs: Jobs, sessions, tracking_settings, mlflow_client
):
    """No owner recorded, but MLflow shows another project's runs in the
    experiment: refused, and the name is not claimed."""
    experiment = mlflow_client.create_experiment(jobs.experiment)
    mlflow_client.create_run(experiment, tags={"trainplane.project": "beta"})
    job_id, _ = jobs.running()
    run_pass(tracking_settings, sessions)
    row = tracking_row(sessions, job_id)
    assert row.run_id is None and "belongs to another project" in row.error
    assert owner(sessions, "experiment", jobs.experiment) is None
    assert len(mlflow_client.search_runs([experiment])) == 1


def test_a_model_with_another_projects_versions_is_not_registered_to(
    jobs: Jobs, sessions, tracking_settings, mlflow_client
):
    mlflow_client.create_registered_model(jobs.model)
    mlflow_client.create_model_version(
        jobs.model, source="file:///nowhere", tags={"trainplane.project": "beta"}
    )
    job_id, _ = jobs.running()
    jobs.export(job_id)
    jobs.end(job_id, JobStatus.SUCCEEDED)
    run_pass(tracking_settings, sessions)
    row = tracking_row(sessions, job_id)
    assert row.model_version is None and "belongs to another project" in row.error
    versions = mlflow_client.search_model_versions(f"name = '{jobs.model}'")
    assert [str(v.version) for v in versions] == ["1"]  # only beta's
    assert owner(sessions, "model", jobs.model) is None


def test_unowned_names_with_no_other_projects_history_are_claimed_by_the_job(
    jobs: Jobs, sessions, tracking_settings, mlflow_client
):
    job_id, _ = jobs.running()
    jobs.export(job_id)
    jobs.end(job_id, JobStatus.SUCCEEDED)
    run_pass(tracking_settings, sessions)
    row = tracking_row(sessions, job_id)
    assert row.error is None and row.model_version == "1"
    assert owner(sessions, "experiment", jobs.experiment) == "default"
    assert owner(sessions, "model", jobs.model) == "default"
