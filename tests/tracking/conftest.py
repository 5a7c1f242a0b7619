"""Tracking fixtures: a real MLflow store (SQLite, shared by the session;
tests keep apart by unique experiment and model names), settings pointing
the control plane at it, and jobs with attempts, points and an exported model."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from tests.factories import (
    example_module,
    make_attempt,
    make_cluster,
    make_job,
    report_progress,
    train_spec,
)
from trainplane.config import Settings
from trainplane.db.base import utcnow
from trainplane.db.models import Job, JobAttempt
from trainplane.jobs.spec import load_spec, parse_spec
from trainplane.jobs.states import JobStatus
from trainplane.runtime.context import TrainContext
from trainplane.services.locations import model_root
from trainplane.services.tracking import start_tracking


@pytest.fixture(scope="session")
def mlflow_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def tracking_settings(settings: Settings, mlflow_uri: str, tmp_path: Path) -> Settings:
    return settings.model_copy(
        update={
            "mlflow_tracking_uri": mlflow_uri,
            "mlflow_artifacts": str(tmp_path / "mlflow-artifacts"),
            "tracking_interval_seconds": 0.01,
        }
    )


@pytest.fixture
def mlflow_client(mlflow_uri: str) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=mlflow_uri, registry_uri=mlflow_uri)


class Jobs:
    """Jobs in given states, written the way the scheduler and runtimes would."""

    def __init__(self, sessions: sessionmaker[Session], settings: Settings) -> None:
        self.sessions = sessions
        self.settings = settings
        self.unique = uuid.uuid4().hex[:8]
        self.experiment = f"exp-{self.unique}"
        self.model = f"model-{self.unique}"
        with sessions() as session:
            self.cluster_id = make_cluster(
                session, f"gpu-{self.unique}", gpus=8, gpus_per_node=2, price_per_gpu_hour=2.5
            ).id

    def spec(self, **overrides: Any) -> dict[str, Any]:
        fields = {
            "tracking": {"experiment": self.experiment, "tags": {"team": "vision"}},
            "register_model": {"name": self.model, "alias": "candidate"},
            **overrides,
        }
        return train_spec(**fields)

    def running(self, **overrides: Any) -> tuple[str, str]:
        """A RUNNING job with its attempt and its tracking row; (job, attempt)."""
        with self.sessions() as session:
            job = make_job(session, status=JobStatus.RUNNING, spec=self.spec(**overrides))
            attempt = make_attempt(session, job.id, cluster_id=self.cluster_id)
            with session.begin():
                start_tracking(session, [job.id], utcnow())
        return job.id, attempt.id

    def report(self, job_id: str, attempt_id: str, steps: range, loss: Callable[[int], float]):
        body = {
            "step": steps[-1],
            "points": [
                {"step": s, "time": 1_700_000_000 + s, "metrics": {"loss": loss(s), "lr": 0.1}}
                for s in steps
            ],
        }
        with self.sessions() as session:
            report_progress(session, job_id, attempt_id, body)

    def end(self, job_id: str, status: JobStatus, minutes: float = 30) -> None:
        """The job and its attempts ended ``minutes`` after they started."""
        with self.sessions() as session, session.begin():
            attempt = session.query(JobAttempt).filter_by(job_id=job_id).one()
            end = attempt.started_at + timedelta(minutes=minutes)
            attempt.status = "SUCCEEDED" if status is JobStatus.SUCCEEDED else "FAILED"
            attempt.finished_at = end
            session.execute(
                update(Job).where(Job.id == job_id).values(status=status.value, finished_at=end)
            )

    def model_root(self, job_id: str) -> str:
        with self.sessions() as session, session.begin():
            job = session.get_one(Job, job_id)
            return model_root(
                job.folder,
                load_spec(job.spec),
                job.project_name,
                job.id,
                self.settings.resolved_checkpoint_storage,
            )

    def export(self, job_id: str, steps: int = 5) -> torch.nn.Module:
        """Train the MLP example a few steps here (world of one) and export it
        as the runtime does at the end of a train function; returns the model."""
        with self.sessions() as session, session.begin():
            spec = session.get_one(Job, job_id).spec
        spec = {**spec, "entrypoint": {**spec["entrypoint"], "args": {"steps": steps}}}
        spec["strategy"] = {"type": "ddp"}
        context = TrainContext(
            parse_spec(spec),
            rank=0,
            local_rank=0,
            world_size=1,
            device=torch.device("cpu"),
            job_id=job_id,
            model_root=self.model_root(job_id),
        )
        example_module("mlp").train_loop(context)
        context.export_model()
        return context.unwrap()


@pytest.fixture
def jobs(sessions: sessionmaker[Session], tracking_settings: Settings) -> Jobs:
    return Jobs(sessions, tracking_settings)
