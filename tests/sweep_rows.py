"""Sweeps and their trials written to the database the way the controller,
the scheduler and the runtimes write them, so that tests of what users see
of a sweep (pages, MLflow runs, usage) need no Ray: the sweep's row is
written as its submit writes it, each trial is inserted with the controller's own
``insert_trial_job``, and its attempt, metric points and objective values
are then set as a run would have left them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from tests.factories import EXAMPLES, make_attempt
from trainplane.db.base import utcnow
from trainplane.db.models import Job, JobAttempt, JobMetric, SweepTrial
from trainplane.ids import new_id
from trainplane.jobs.spec import load_sweep_spec, parse_spec
from trainplane.jobs.states import JobStatus
from trainplane.jobs.sweep_spec import SweepSpec
from trainplane.services.submissions import spec_fingerprint
from trainplane.services.sweeps import insert_trial_job

ATTEMPT_STATUS = {
    JobStatus.SUCCEEDED: "SUCCEEDED",
    JobStatus.FAILED: "FAILED",
    JobStatus.CANCELLED: "STOPPED",
    JobStatus.RUNNING: "RUNNING",
}


def sweep_spec(name: str = "lr-search", **overrides: Any) -> dict[str, Any]:
    """A sweep over examples/mlp's learning rate (log-uniform) and batch size."""
    spec: dict[str, Any] = {
        "kind": "sweep",
        "name": name,
        "trial": {
            "kind": "train",
            "entrypoint": {
                "function": "train:train_loop",
                "working_dir": str(EXAMPLES / "mlp"),
                "args": {"steps": 40},
            },
            "resources": {"gpus": 2},
            "strategy": {"type": "ddp"},
        },
        "parameters": {
            "entrypoint.args.lr": {"distribution": "log_uniform", "low": 1e-4, "high": 1.0},
            "entrypoint.args.global_batch": {"values": [32, 64]},
        },
        "objective": {"metric": "loss", "mode": "min"},
        "search": {"algorithm": "random", "trials": 4, "parallel": 2, "seed": 3},
    }
    spec.update(overrides)
    return spec


def insert_sweep(session: Session, spec: dict[str, Any], project_id: str = "0" * 26) -> str:
    """The sweep's job row as its submit writes it (QUEUED); returns its id."""
    sweep = parse_spec(spec)
    assert isinstance(sweep, SweepSpec)
    document = sweep.model_dump(mode="json")
    now = utcnow()
    job = Job(
        id=new_id(),
        project_id=project_id,
        name=sweep.name,
        kind="sweep",
        status=JobStatus.QUEUED.value,
        reason="submitted",
        priority=50,
        gpus=sweep.max_trial_gpus(),
        gpus_per_node=sweep.max_trial_gpus(),
        gpu_type=None,
        max_runtime_seconds=None,
        strategy="sweep",
        spec=document,
        spec_hash=spec_fingerprint(document),
        submitted_by="tests",
        idempotency_key=None,
        created_at=now,
        updated_at=now,
    )
    with session.begin():
        session.add(job)
    return job.id


def set_sweep_status(session: Session, sweep_id: str, status: JobStatus) -> None:
    now = utcnow()
    ended = now if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED) else None
    with session.begin():
        session.execute(
            update(Job)
            .where(Job.id == sweep_id)
            .values(status=status.value, reason=f"test: {status.value}", finished_at=ended)
        )


def add_trial(
    session: Session,
    sweep_id: str,
    number: int,
    parameters: dict[str, Any],
    *,
    status: JobStatus,
    losses: list[float] = (),  # type: ignore[assignment]
    cluster_id: str | None = None,
    minutes: float = 30.0,
    pruned: str | None = None,
) -> str:
    """Trial ``number`` of the sweep, ended in ``status`` (or RUNNING) after
    one attempt of ``minutes`` that reported ``losses`` at steps 10, 20, ...;
    returns its job id."""
    now = utcnow()
    with session.begin():
        sweep = session.get_one(Job, sweep_id)
        spec = load_sweep_spec(sweep.spec).trial_spec(parameters, number)
        trial = insert_trial_job(
            session, sweep, spec, number=number, parameters=parameters, decision_steps=[], now=now
        )
        trial_id = trial.id
    attempt = make_attempt(
        session, trial_id, status=ATTEMPT_STATUS.get(status, "RUNNING"), cluster_id=cluster_id
    )
    started = now - timedelta(minutes=minutes)
    ended = None if status is JobStatus.RUNNING else now
    steps = [10 * (i + 1) for i in range(len(losses))]
    with session.begin():
        session.execute(
            update(JobAttempt)
            .where(JobAttempt.id == attempt.id)
            .values(started_at=started, finished_at=ended)
        )
        session.execute(
            update(Job)
            .where(Job.id == trial_id)
            .values(
                status=status.value,
                reason=pruned or f"test: {status.value}",
                started_at=started,
                finished_at=ended,
            )
        )
        session.add_all(
            JobMetric(
                job_id=trial_id,
                attempt_id=attempt.id,
                attempt=1,
                step=step,
                recorded_at=started + timedelta(seconds=step),
                values={"loss": loss},
            )
            for step, loss in zip(steps, losses, strict=True)
        )
        session.execute(
            update(SweepTrial)
            .where(SweepTrial.job_id == trial_id)
            .values(
                last_value=losses[-1] if losses else None,
                best_value=min(losses) if losses else None,
                last_step=steps[-1] if steps else None,
                values={str(s): v for s, v in zip(steps, losses, strict=True)},
                pruned_reason=pruned,
            )
        )
    return trial_id
