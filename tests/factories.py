"""Test data: valid specs to mutate, rows inserted directly (bypassing the
state machine) for tests that need a job in a given status or at a given time,
progress reported as a runtime reports it, and the examples' train code."""

from __future__ import annotations

import copy
import importlib.util
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from trainplane.db.base import utcnow
from trainplane.db.models import Cluster, Job, JobAttempt, JobEvent, Project
from trainplane.ids import new_id
from trainplane.jobs.progress import ProgressReport
from trainplane.jobs.spec import parse_spec
from trainplane.jobs.states import JobStatus
from trainplane.services import progress
from trainplane.services.attempt_tokens import TokenKey, attempt_token
from trainplane.services.jobs import spec_fingerprint

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

TRAIN_SPEC: dict[str, Any] = {
    "kind": "train",
    "name": "mnist-ddp",
    "project": "default",
    "entrypoint": {
        "function": "train:train_loop",
        "args": {"epochs": 3},
        # A folder of the server's: the test settings list EXAMPLES in
        # server_paths, as an operator lists a shared code folder.
        "working_dir": str(EXAMPLES / "mlp"),
    },
    "resources": {"gpus": 4, "gpus_per_node": 2, "cpus_per_worker": 2},
    "strategy": {"type": "fsdp", "fsdp": {"reshard_after_forward": True}},
    "precision": "bf16",
    "checkpoint": {"every_steps": 100, "keep_last": 2, "keep_best": {"metric": "eval_loss"}},
    "retries": {"max_restarts": 2, "backoff_seconds": 5},
    "priority": "high",
    "max_runtime": "24h",
    "tracking": {"experiment": "mnist", "tags": {"team": "vision"}},
    "register_model": {"name": "mnist-classifier", "alias": "candidate"},
}

FINETUNE_SPEC: dict[str, Any] = {
    "kind": "finetune",
    "name": "tiny-lora",
    "project": "default",
    "base_model": "s3://models/tiny-llama",
    "dataset": {"train": "/data/train.jsonl", "eval": "/data/eval.jsonl"},
    "method": {"type": "lora", "r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]},
    "hyperparameters": {"learning_rate": 1e-4, "max_steps": 50, "micro_batch_size": 2},
    "resources": {"gpus": 2},
    "strategy": {"type": "deepspeed", "deepspeed": {"stage": 3, "offload_optimizer": "cpu"}},
}


def train_spec(**overrides: Any) -> dict[str, Any]:
    spec = copy.deepcopy(TRAIN_SPEC)
    spec.update(overrides)
    return spec


def finetune_spec(**overrides: Any) -> dict[str, Any]:
    spec = copy.deepcopy(FINETUNE_SPEC)
    spec.update(overrides)
    return spec


def make_project(session: Session, name: str) -> Project:
    project = Project(id=new_id(), name=name, description="", created_at=utcnow())
    with session.begin():
        session.add(project)
    return project


def insert_jobs(
    session: Session,
    count: int,
    *,
    project_id: str = "0" * 26,
    status: JobStatus = JobStatus.QUEUED,
    name: str = "job",
    created_at: datetime | None = None,
    spec: dict[str, Any] | None = None,
    priority: int = 50,
) -> list[str]:
    """Insert ``count`` jobs in one statement; returns their ids."""
    parsed = parse_spec(spec or train_spec(name=name))
    document = parsed.model_dump(mode="json")
    max_runtime_seconds = parsed.max_runtime_seconds
    now = created_at or utcnow()
    rows = [
        {
            "id": new_id(),
            "project_id": project_id,
            "name": name,
            "kind": document["kind"],
            "status": status.value,
            "reason": "test",
            "priority": priority,
            "gpus": document["resources"]["gpus"],
            "gpus_per_node": document["resources"]["gpus_per_node"],
            "gpu_type": document["resources"]["gpu_type"],
            "max_runtime_seconds": max_runtime_seconds,
            "strategy": document["strategy"]["type"],
            "spec": document,
            "spec_hash": spec_fingerprint(document),
            "submitted_by": "tests",
            "idempotency_key": None,
            "created_at": now,
            "updated_at": now,
        }
        for _ in range(count)
    ]
    with session.begin():
        session.execute(insert(Job), rows)
    return [r["id"] for r in rows]


def make_job(session: Session, *, status: JobStatus = JobStatus.QUEUED, **kwargs: Any) -> Job:
    (job_id,) = insert_jobs(session, 1, status=status, **kwargs)
    with session.begin():
        return session.get_one(Job, job_id)


def make_attempt(
    session: Session,
    job_id: str,
    *,
    number: int = 1,
    status: str = "RUNNING",
    cluster_id: str | None = None,
) -> JobAttempt:
    """An attempt of ``job_id`` in ``status``, inserted directly."""
    now = utcnow()
    attempt = JobAttempt(
        id=new_id(),
        job_id=job_id,
        number=number,
        status=status,
        cluster_id=cluster_id,
        created_at=now,
        started_at=now if status != "PENDING" else None,
    )
    with session.begin():
        session.add(attempt)
    return attempt


def count_rows(session: Session) -> tuple[int, int]:
    """(jobs, job events) in the database."""
    from sqlalchemy import func, select

    with session.begin():
        jobs = session.scalar(select(func.count()).select_from(Job))
        events = session.scalar(select(func.count()).select_from(JobEvent))
    return jobs or 0, events or 0


def make_cluster(
    session: Session,
    name: str = "local",
    *,
    gpus: int = 2,
    gpus_per_node: int | None = None,
    accelerator: str = "cpu",
    address: str = "http://127.0.0.1:9",
    status: str = "READY",
    price_per_gpu_hour: float = 0.0,
    gpu_memory_gb: float | None = None,
) -> Cluster:
    now = utcnow()
    cluster = Cluster(
        id=new_id(),
        name=name,
        address=address,
        accelerator=accelerator,
        gpus=gpus,
        gpus_per_node=gpus_per_node or gpus,
        gpu_memory_gb=gpu_memory_gb,
        price_per_gpu_hour=price_per_gpu_hour,
        labels={},
        status=status,
        status_message="",
        created_at=now,
        updated_at=now,
    )
    with session.begin():
        session.add(cluster)
    return cluster


def small_spec(name: str = "j", gpus: int = 2, **overrides: Any) -> dict[str, Any]:
    """A command job, as HTTP clients send them."""
    spec = {
        "kind": "train",
        "name": name,
        "entrypoint": {"command": ["true"]},
        "resources": {"gpus": gpus},
    }
    spec.update(overrides)
    return spec


def report_progress(
    session: Session, job_id: str, attempt_id: str, body: dict[str, Any]
) -> progress.StopRequest | None:
    """``body`` posted as the attempt's runtime posts it, with its token; the
    stop answered, if any."""
    key = TokenKey(None)
    return progress.record_progress(
        session,
        key,
        job_id=job_id,
        attempt_id=attempt_id,
        token=attempt_token(key.get(session), attempt_id),
        report=ProgressReport.model_validate(body),
    )


def example_module(name: str) -> ModuleType:
    """``examples/<name>/train.py``, loaded afresh."""
    spec = importlib.util.spec_from_file_location(f"{name}_example", EXAMPLES / name / "train.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- reading rows back, fresh from the database -------------------------------------


def job_row(session: Session, job_id: str) -> Job:
    session.expunge_all()
    with session.begin():
        return session.get_one(Job, job_id)


def job_events(session: Session, job_id: str) -> list[tuple[str | None, str, str]]:
    """(from, to, reason) of each of the job's events, oldest first."""
    with session.begin():
        return [
            (e.from_status, e.to_status, e.reason)
            for e in session.scalars(
                select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)
            )
        ]


def job_attempts(session: Session, job_id: str) -> list[JobAttempt]:
    session.expunge_all()
    with session.begin():
        return list(
            session.scalars(
                select(JobAttempt).where(JobAttempt.job_id == job_id).order_by(JobAttempt.number)
            )
        )


def aged_job(
    session: Session,
    name: str,
    gpus: int,
    *,
    project: Project,
    ago: timedelta = timedelta(0),
    status: JobStatus = JobStatus.QUEUED,
    **spec: Any,
) -> str:
    """A command job of ``project`` submitted ``ago`` before now; its id."""
    (job_id,) = insert_jobs(
        session,
        1,
        spec=small_spec(name, gpus=gpus, **spec),
        project_id=project.id,
        created_at=utcnow() - ago,
        status=status,
    )
    return job_id


def ran_for(
    session: Session,
    job_id: str,
    *,
    hours: float,
    cluster: str | None = None,
    number: int = 1,
    live: bool = False,
) -> str:
    """An attempt of the job that started ``hours`` ago (ended now unless
    ``live``); its id."""
    attempt = make_attempt(
        session, job_id, number=number, status="RUNNING" if live else "STOPPED", cluster_id=cluster
    )
    now = utcnow()
    with session.begin():
        session.execute(
            update(JobAttempt)
            .where(JobAttempt.id == attempt.id)
            .values(started_at=now - timedelta(hours=hours), finished_at=None if live else now)
        )
    return attempt.id
