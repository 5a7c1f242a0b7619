"""A sweep in MLflow, against a real MLflow store: the sweep's run is the
parent of its trials' runs (a trial's run waits for it), carries the search
space and the best objective, and when the sweep succeeded registers the best
trial's exported model, once; no trial registers its own. The sweep and its
trials are written to the database as the controller and runtimes write them."""

from __future__ import annotations

import pytest
import torch
from sqlalchemy.orm import Session, sessionmaker

from tests.factories import job_attempts
from tests.sweep_rows import add_trial, insert_sweep, set_sweep_status, sweep_spec
from tests.tracking.conftest import Jobs
from tests.tracking.test_tracking_loop import make_due, run_pass, tracking_row
from trainplane.db.base import utcnow
from trainplane.db.models import SweepTrial
from trainplane.jobs.states import JobStatus
from trainplane.services.tracking import start_tracking

pytestmark = pytest.mark.usefixtures("one_rank_group")


def track(sessions: sessionmaker[Session], *job_ids: str) -> None:
    with sessions() as session, session.begin():
        start_tracking(session, job_ids, utcnow())


def set_status(sessions: sessionmaker[Session], sweep_id: str, status: JobStatus) -> None:
    with sessions() as session:
        set_sweep_status(session, sweep_id, status)


def test_a_sweep_is_the_parent_run_of_its_trials_and_registers_the_best_trials_model(
    jobs: Jobs, sessions, tracking_settings, mlflow_client, mlflow_uri, monkeypatch
):
    spec = sweep_spec(register_model={"name": jobs.model, "alias": "best"})
    spec["trial"]["tracking"] = {"experiment": jobs.experiment}
    with sessions() as session:
        sweep_id = insert_sweep(session, spec)
    set_status(sessions, sweep_id, JobStatus.RUNNING)
    lr = "entrypoint.args.lr"
    with sessions() as session:
        best = add_trial(
            session, sweep_id, 1, {lr: 0.01, "entrypoint.args.global_batch": 32},
            status=JobStatus.RUNNING, losses=[1.0], cluster_id=jobs.cluster_id,
        )  # fmt: skip
    # Both rows are due in the same pass: the trial's run waits for the sweep's.
    track(sessions, sweep_id, best)
    run_pass(tracking_settings, sessions)
    parent = tracking_row(sessions, sweep_id)
    assert parent.run_id and parent.error is None
    waiting = tracking_row(sessions, best)
    assert waiting.run_id is None and waiting.error is None and waiting.finished_at is None

    make_due(sessions, best)
    run_pass(tracking_settings, sessions)
    child = mlflow_client.get_run(tracking_row(sessions, best).run_id)
    assert child.data.tags["mlflow.parentRunId"] == parent.run_id
    assert child.info.experiment_id == parent.experiment_id
    assert child.data.params[lr] == "0.01"
    run = mlflow_client.get_run(parent.run_id)
    assert mlflow_client.get_experiment(run.info.experiment_id).name == jobs.experiment
    assert run.data.params[lr] == "log_uniform(0.0001, 1)"
    assert run.data.params["entrypoint.args.global_batch"] == "values [32, 64]"
    assert run.data.params["search.algorithm"] == "random"
    assert run.data.params["search.trials"] == "4" and run.data.params["objective.metric"] == "loss"

    # The best trial ends with its model exported (its runtime does that for
    # register_model); a worse one ends too, and a third is pruned.
    with sessions() as session:
        worse = add_trial(
            session, sweep_id, 2, {lr: 0.5, "entrypoint.args.global_batch": 64},
            status=JobStatus.SUCCEEDED, losses=[2.0, 0.9], cluster_id=jobs.cluster_id,
        )  # fmt: skip
        pruned = add_trial(
            session, sweep_id, 3, {lr: 0.9, "entrypoint.args.global_batch": 64},
            status=JobStatus.CANCELLED, losses=[5.0], cluster_id=jobs.cluster_id,
            pruned="pruned at rung 0 (step 10)",
        )  # fmt: skip
    jobs.report(best, _attempt_of(sessions, best), range(20, 21), lambda _: 0.4)
    trained = jobs.export(best)
    jobs.end(best, JobStatus.SUCCEEDED)
    with sessions() as session, session.begin():
        row = session.get_one(SweepTrial, best)
        row.last_value, row.best_value, row.last_step = 0.4, 0.4, 20
    set_status(sessions, sweep_id, JobStatus.SUCCEEDED)
    track(sessions, worse, pruned)
    for job_id in (sweep_id, best):
        make_due(sessions, job_id)
    run_pass(tracking_settings, sessions)
    make_due(sessions, sweep_id)  # the trials' runs may have been made after it
    run_pass(tracking_settings, sessions)

    parent = tracking_row(sessions, sweep_id)
    assert parent.finished_at is not None and parent.error is None
    assert (parent.model_name, parent.model_version) == (jobs.model, "1")
    run = mlflow_client.get_run(parent.run_id)
    assert run.info.status == "FINISHED"
    history = mlflow_client.get_metric_history(parent.run_id, "best_loss")
    assert history and history[-1].value == pytest.approx(0.4)
    assert run.data.tags["trainplane.best_trial"] == best
    # 3 trials x 2 GPUs x 30 min at 2.5 per GPU-hour: the sweep's run sums them.
    assert run.data.metrics["trainplane.gpu_hours"] == pytest.approx(3.0)
    version = mlflow_client.get_model_version_by_alias(jobs.model, "best")
    assert str(version.version) == "1" and version.run_id == parent.run_id
    assert version.tags["trainplane.job_id"] == best
    for trial in (best, worse):
        row = tracking_row(sessions, trial)
        assert row.finished_at is not None and row.model_version is None and row.error is None
        child = mlflow_client.get_run(row.run_id)
        assert child.data.tags["mlflow.parentRunId"] == parent.run_id

    import mlflow.pytorch

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    loaded = mlflow.pytorch.load_model(f"models:/{jobs.model}@best")
    probe = torch.randn(5, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.allclose(loaded(probe), trained(probe), atol=1e-6)

    # A finish retried from scratch finds the version it made.
    make_due(sessions, sweep_id, finished_at=None, model_version=None)
    run_pass(tracking_settings, sessions)
    assert tracking_row(sessions, sweep_id).model_version == "1"
    assert len(mlflow_client.search_model_versions(f"name = '{jobs.model}'")) == 1


def _attempt_of(sessions: sessionmaker[Session], job_id: str) -> str:
    with sessions() as session:
        return job_attempts(session, job_id)[0].id
