"""How fast the tracking loop moves reported points into MLflow, against
writing the same values with MLflow's own client, in the same run.

A throwaway PostgreSQL holds trainplane's store and, in a second database, the
store of a real ``mlflow server`` on 127.0.0.1. ``--jobs`` running jobs have
``--points`` metric points each in ``job_metrics`` (4 metrics a point).
Measured:

  - baseline: ``MlflowClient.log_batch`` of the same values, 1000 a call, into
    one run per job from one thread: what a hand-written exporter does
  - trainplane: tracking passes (``TrackingLoop.run_once``) until every point
    is in its job's run, creating the runs and logging their params and tags
    on the way

Target: trainplane moves values at >= 0.8x the baseline's rate, so tracking
keeps up with whatever the MLflow server can take.

    .venv/bin/python benchmarks/tracking_sync.py [--jobs 16] [--points 2000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, insert, select

from trainplane.config import Settings
from trainplane.db import migrate
from trainplane.db.base import utcnow
from trainplane.db.engine import make_engine, session_factory
from trainplane.db.models import Job, JobAttempt, JobMetric, JobTracking
from trainplane.ids import new_id
from trainplane.jobs.spec import parse_spec
from trainplane.scheduler.tracking import TrackingLoop
from trainplane.services.jobs import spec_fingerprint
from trainplane.services.tracking import start_tracking
from trainplane.testing.mlflow_server import MlflowServer
from trainplane.testing.postgres import ThrowawayPostgres

METRICS = ("loss", "lr", "step_time_s", "samples_per_s")


def fill(url: str, jobs: int, points: int) -> list[str]:
    spec = parse_spec(
        {
            "kind": "train",
            "name": "bench",
            "entrypoint": {"function": "train:loop", "args": {"lr": 0.001, "layers": 12}},
            "resources": {"gpus": 8},
            "strategy": {"type": "fsdp"},
            "tracking": {"experiment": "bench-trainplane"},
        }
    ).model_dump(mode="json")
    now = utcnow()
    ids = [new_id() for _ in range(jobs)]
    engine = make_engine(url)
    with session_factory(engine)() as session, session.begin():
        session.execute(
            insert(Job),
            [
                {
                    "id": job_id,
                    "project_id": "0" * 26,
                    "name": f"bench-{n}",
                    "kind": "train",
                    "status": "RUNNING",
                    "reason": "",
                    "priority": 50,
                    "gpus": 8,
                    "gpus_per_node": None,
                    "gpu_type": None,
                    "max_runtime_seconds": None,
                    "strategy": "fsdp",
                    "spec": spec,
                    "spec_hash": spec_fingerprint(spec),
                    "submitted_by": "bench",
                    "idempotency_key": None,
                    "created_at": now,
                    "updated_at": now,
                    "started_at": now,
                }
                for n, job_id in enumerate(ids)
            ],
        )
        attempts = {job_id: new_id() for job_id in ids}
        session.execute(
            insert(JobAttempt),
            [
                {
                    "id": attempts[job_id],
                    "job_id": job_id,
                    "number": 1,
                    "status": "RUNNING",
                    "created_at": now,
                    "started_at": now,
                    "reason": "",
                    "log_tail": "",
                }
                for job_id in ids
            ],
        )
        for job_id in ids:
            session.execute(
                insert(JobMetric),
                [
                    {
                        "job_id": job_id,
                        "attempt_id": attempts[job_id],
                        "attempt": 1,
                        "step": step,
                        "recorded_at": now + timedelta(seconds=step),
                        "values": {name: 1.0 / step for name in METRICS},
                    }
                    for step in range(1, points + 1)
                ],
            )
        start_tracking(session, ids, now)
    engine.dispose()
    return ids


def baseline(mlflow_url: str, jobs: int, points: int) -> float:
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient(mlflow_url)
    experiment = client.create_experiment("bench-baseline")
    started = time.perf_counter()
    base = int(time.time() * 1000)
    for n in range(jobs):
        run = client.create_run(experiment, run_name=f"bench-{n}").info.run_id
        values = [
            Metric(name, 1.0 / step, base + step * 1000, step)
            for step in range(1, points + 1)
            for name in METRICS
        ]
        for start in range(0, len(values), 1000):
            client.log_batch(run, metrics=values[start : start + 1000], synchronous=True)
    return time.perf_counter() - started


def through_trainplane(url: str, mlflow_url: str, home: Path) -> tuple[float, int]:
    settings = Settings(
        home=home,
        database_url=url,
        auto_migrate=False,
        mlflow_tracking_uri=mlflow_url,
        tracking_interval_seconds=0.01,
    )
    engine = make_engine(url)
    sessions = session_factory(engine)
    loop = TrackingLoop(settings, sessions)
    passes = 0
    started = time.perf_counter()
    try:
        while True:
            loop.run_once()
            passes += 1
            with sessions() as session:
                behind = session.scalar(
                    select(func.count())
                    .select_from(JobTracking)
                    .where(
                        JobTracking.synced_metric_id
                        < select(func.max(JobMetric.id))
                        .where(JobMetric.job_id == JobTracking.job_id)
                        .scalar_subquery()
                    )
                )
            if not behind:
                return time.perf_counter() - started, passes
    finally:
        loop.stop()
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--points", type=int, default=2000)
    options = parser.parse_args()
    values = options.jobs * options.points * len(METRICS)
    with ThrowawayPostgres() as postgres, tempfile.TemporaryDirectory() as work:
        url = postgres.create_database("trainplane")
        migrate.upgrade(url)
        fill(url, options.jobs, options.points)
        store = postgres.create_database("mlflow")
        with MlflowServer(store, str(Path(work) / "artifacts")) as server:
            print(f"{options.jobs} jobs x {options.points} points x {len(METRICS)} metrics")
            base = baseline(server.url, options.jobs, options.points)
            print(f"baseline   log_batch directly  {base:7.2f} s  {values / base:9.0f} values/s")
            took, passes = through_trainplane(url, server.url, Path(work) / "home")
            print(
                f"trainplane tracking loop       {took:7.2f} s  {values / took:9.0f} values/s "
                f"({passes} passes)"
            )
            ratio = base / took
            print(f"ratio trainplane/baseline: {ratio:.2f}x (target >= 0.80x)")


if __name__ == "__main__":
    main()
