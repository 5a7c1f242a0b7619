"""The tracking loop against a real MLflow store: runs for jobs, their points
and tags, registered models, and what happens when MLflow is away. The jobs are
written to the database the way the scheduler and runtimes write them."""

from __future__ import annotations

import functools
import time
from datetime import timedelta

import pytest
import torch
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from tests.tracking.conftest import Jobs
from trainplane.config import Settings
from trainplane.db.base import utcnow
from trainplane.db.models import JobTracking
from trainplane.jobs.states import JobStatus
from trainplane.net import free_port
from trainplane.scheduler.tracking import (
    LeaseKeeper,
    TrackingLoop,
    name_claimer,
    sync,
)
from trainplane.services import tracking as tracking_service
from trainplane.tracking.client import MlflowTracking, tracking_config

pytestmark = pytest.mark.usefixtures("one_rank_group")


def tracking_row(sessions: sessionmaker[Session], job_id: str) -> JobTracking:
    with sessions() as session, session.begin():
        return session.get_one(JobTracking, job_id)


def make_due(sessions: sessionmaker[Session], job_id: str, **values: object) -> None:
    with sessions() as session, session.begin():
        session.execute(
            update(JobTracking)
            .where(JobTracking.job_id == job_id)
            .values(lease_expires_at=None, **values)
        )


def run_pass(settings: Settings, sessions: sessionmaker[Session]) -> None:
    loop = TrackingLoop(settings, sessions)
    try:
        loop.run_once()
    finally:
        loop.stop()


def loss(step: int) -> float:
    return 2.0 / step


def test_a_running_job_gets_one_run_with_params_tags_and_every_point(
    jobs: Jobs, sessions, tracking_settings, mlflow_client
):
    job_id, attempt_id = jobs.running(strategy={"type": "deepspeed", "deepspeed": {"stage": 3}})
    jobs.report(job_id, attempt_id, range(1, 4), loss)
    run_pass(tracking_settings, sessions)

    row = tracking_row(sessions, job_id)
    assert row.run_id and row.error is None and row.finished_at is None
    run = mlflow_client.get_run(row.run_id)
    assert run.info.status == "RUNNING" and run.info.run_name == "job"
    experiment = mlflow_client.get_experiment(run.info.experiment_id)
    assert experiment.name == jobs.experiment
    params = run.data.params
    assert params["strategy.type"] == "deepspeed" and params["strategy.deepspeed.stage"] == "3"
    assert params["resources.gpus"] == "4" and params["nodes"] == "2"
    assert params["cluster"] == f"gpu-{jobs.unique}" and params["precision"] == "bf16"
    tags = run.data.tags
    assert tags["trainplane.job_id"] == job_id and tags["trainplane.attempts"] == "1"
    assert tags["team"] == "vision" and tags["trainplane.submitter"] == "tests"

    jobs.report(job_id, attempt_id, range(4, 6), loss)
    make_due(sessions, job_id)
    run_pass(tracking_settings, sessions)
    history = mlflow_client.get_metric_history(row.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(s, loss(s)) for s in range(1, 6)]
    assert history[0].timestamp == 1_700_000_001_000  # the time the runtime measured it
    runs = mlflow_client.search_runs([run.info.experiment_id])
    assert len(runs) == 1


def test_a_run_made_by_an_interrupted_pass_is_found_not_made_twice(
    jobs: Jobs, sessions, tracking_settings, mlflow_client
):
    job_id, _ = jobs.running()
    run_pass(tracking_settings, sessions)
    first = tracking_row(sessions, job_id)
    # As if the pass had died after creating the run, before recording it.
    make_due(sessions, job_id, run_id=None, experiment_id=None, run_url=None)
    run_pass(tracking_settings, sessions)
    assert tracking_row(sessions, job_id).run_id == first.run_id
    assert len(mlflow_client.search_runs([first.experiment_id])) == 1


def test_a_succeeded_job_registers_one_version_that_loads_as_trained(
    jobs: Jobs, sessions, tracking_settings, mlflow_client, mlflow_uri, monkeypatch
):
    job_id, attempt_id = jobs.running()
    jobs.report(job_id, attempt_id, range(1, 6), loss)
    trained = jobs.export(job_id)
    jobs.end(job_id, JobStatus.SUCCEEDED, minutes=30)
    run_pass(tracking_settings, sessions)

    row = tracking_row(sessions, job_id)
    assert row.finished_at is not None and row.error is None
    assert (row.model_name, row.model_version) == (jobs.model, "1")
    run = mlflow_client.get_run(row.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["trainplane.status"] == "SUCCEEDED"
    # 4 GPUs for 30 minutes at 2.5 per GPU-hour.
    assert run.data.metrics["trainplane.gpu_hours"] == pytest.approx(2.0)
    assert run.data.metrics["trainplane.cost"] == pytest.approx(5.0)
    assert run.data.metrics["trainplane.lost_gpu_hours"] == 0.0  # one attempt, none replaced
    version = mlflow_client.get_model_version_by_alias(jobs.model, "candidate")
    assert str(version.version) == "1" and version.run_id == row.run_id
    assert version.tags["trainplane.job_id"] == job_id

    import mlflow.pytorch

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    loaded = mlflow.pytorch.load_model(f"models:/{jobs.model}@candidate")
    probe = torch.randn(7, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(loaded(probe), trained(probe), atol=1e-6)

    # A finish retried from scratch (the record of the version lost) finds
    # the version it made instead of making another.
    make_due(sessions, job_id, finished_at=None, model_version=None)
    run_pass(tracking_settings, sessions)
    assert tracking_row(sessions, job_id).model_version == "1"
    assert len(mlflow_client.search_model_versions(f"name = '{jobs.model}'")) == 1


def test_a_failed_job_registers_nothing_even_with_a_model_exported(
    jobs: Jobs, sessions, tracking_settings, mlflow_client
):
    job_id, _ = jobs.running()
    jobs.export(job_id)
    jobs.end(job_id, JobStatus.FAILED)
    run_pass(tracking_settings, sessions)
    row = tracking_row(sessions, job_id)
    assert row.finished_at is not None and row.model_version is None
    assert mlflow_client.get_run(row.run_id).info.status == "FAILED"
    assert mlflow_client.search_model_versions(f"name = '{jobs.model}'") == []


def test_a_success_without_an_exported_model_closes_the_run_and_says_why(
    jobs: Jobs, sessions, tracking_settings, mlflow_client
):
    job_id, _ = jobs.running()
    jobs.end(job_id, JobStatus.SUCCEEDED)
    run_pass(tracking_settings, sessions)
    row = tracking_row(sessions, job_id)
    assert row.finished_at is not None and row.model_version is None
    assert "nothing registered: no exported model" in row.error
    assert mlflow_client.get_run(row.run_id).info.status == "FINISHED"


def test_points_wait_in_the_database_while_mlflow_is_unreachable(
    jobs: Jobs, sessions, tracking_settings, mlflow_client
):
    job_id, attempt_id = jobs.running()
    jobs.report(job_id, attempt_id, range(1, 11), loss)
    down = tracking_settings.model_copy(
        update={"mlflow_tracking_uri": f"http://127.0.0.1:{free_port()}"}
    )
    started = time.monotonic()
    run_pass(down, sessions)
    assert time.monotonic() - started < 30  # no minutes of client-side retries
    row = tracking_row(sessions, job_id)
    assert row.run_id is None and row.synced_metric_id == 0
    assert "MLflow at http://127.0.0.1" in row.error and row.failures == 1
    assert row.lease_expires_at > row.error_at  # backing off

    jobs.report(job_id, attempt_id, range(11, 21), loss)
    jobs.end(job_id, JobStatus.SUCCEEDED)
    jobs.export(job_id)
    make_due(sessions, job_id)
    run_pass(tracking_settings, sessions)
    row = tracking_row(sessions, job_id)
    assert row.error is None and row.failures == 0 and row.finished_at is not None
    history = mlflow_client.get_metric_history(row.run_id, "loss")
    assert [m.step for m in history] == list(range(1, 21))
    assert row.model_version == "1"


def test_a_pass_that_lost_its_lease_while_uploading_registers_nothing(
    jobs: Jobs, sessions, tracking_settings, mlflow_client
):
    job_id, _ = jobs.running()
    jobs.export(job_id)
    jobs.end(job_id, JobStatus.SUCCEEDED)
    mlflow = MlflowTracking(tracking_config(tracking_settings))
    with sessions() as session:
        (stalled,) = claim(session, utcnow(), tracking_settings)
        # Its lease runs out before it gets to the registry: another takes over.
        (current,) = claim(
            session,
            utcnow() + timedelta(seconds=tracking_settings.tracking_lease_seconds + 1),
            tracking_settings,
        )
    result = sync(
        stalled,
        mlflow,
        utcnow(),
        api_url=None,
        keep_lease=functools.partial(
            LeaseKeeper, sessions, stalled, tracking_settings.tracking_lease_seconds
        ),
        claim_name=name_claimer(sessions, stalled.project_id),
    )
    assert "lost the job's lease" in result.error and result.model_version is None
    assert mlflow_client.search_model_versions(f"name = '{jobs.model}'") == []
    taken = sync(
        current,
        mlflow,
        utcnow(),
        api_url=None,
        keep_lease=functools.partial(
            LeaseKeeper, sessions, current, tracking_settings.tracking_lease_seconds
        ),
        claim_name=name_claimer(sessions, current.project_id),
    )
    assert taken.error is None and taken.model_version == "1" and taken.finished


def claim(session: Session, now, settings: Settings):
    return tracking_service.claim_tracking(
        session,
        now,
        lease_seconds=settings.tracking_lease_seconds,
        limit=10,
        points_per_pass=100,
        default_storage=settings.resolved_checkpoint_storage,
    )
