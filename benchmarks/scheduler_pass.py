"""One scheduling pass over 10,000 queued jobs and 100 clusters, on PostgreSQL.

The clusters (8 GPUs each, H100/A10/cpu mixed) are busy with running attempts
that hold about 90% of the GPUs; the queue mixes 1- to 16-GPU jobs, some with a
GPU type, some with a max_runtime. Measured, each over several repetitions:

  - baseline: reading the queued rows alone (the floor of any pass)
  - plan():   the pure placement decision over that queue (EASY backfill)
  - a full pass (lock, read clusters and queue, plan, write the attempts and
    status changes of what it places), rolled back after timing so every
    repetition sees the same state

Target: a full pass < 200 ms.

    .venv/bin/python benchmarks/scheduler_pass.py [--jobs 10000] [--clusters 100]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from datetime import timedelta

from sqlalchemy import insert

from trainplane.db import migrate
from trainplane.db.base import utcnow
from trainplane.db.engine import make_engine, session_factory
from trainplane.db.models import Cluster, Job, JobAttempt
from trainplane.ids import new_id
from trainplane.jobs.placement import plan
from trainplane.jobs.spec import parse_spec
from trainplane.services.clusters import cluster_states
from trainplane.services.jobs import spec_fingerprint
from trainplane.services.placement import load_queue, place_queued_jobs
from trainplane.testing.postgres import ThrowawayPostgres

ACCELERATORS = ["H100"] * 6 + ["A10"] * 3 + ["cpu"]
GPUS_PER_CLUSTER = 8


def job_row(job_id, status, gpus, gpu_type, max_runtime, created, document, fingerprint):
    return {
        "id": job_id,
        "project_id": "0" * 26,
        "name": "bench",
        "kind": "train",
        "status": status,
        "reason": "",
        "priority": random.choice([0, 50, 50, 50, 100]),
        "gpus": gpus,
        "gpus_per_node": None,
        "gpu_type": gpu_type,
        "max_runtime_seconds": max_runtime,
        "strategy": "ddp",
        "spec": document,
        "spec_hash": fingerprint,
        "submitted_by": "bench",
        "idempotency_key": None,
        "created_at": created,
        "updated_at": created,
        "started_at": created if status == "RUNNING" else None,
    }


def fill(url: str, jobs: int, clusters: int) -> None:
    rng = random.Random(7)
    random.seed(7)
    document = parse_spec({"kind": "train", "name": "bench", "entrypoint": {"command": ["x"]}})
    document = document.model_dump(mode="json")
    fingerprint = spec_fingerprint(document)
    engine = make_engine(url)
    now = utcnow()
    with engine.begin() as conn:
        cluster_ids = []
        for i in range(clusters):
            cluster_id = new_id()
            cluster_ids.append(cluster_id)
            conn.execute(
                insert(Cluster).values(
                    id=cluster_id,
                    name=f"c{i:03d}",
                    address=f"http://10.0.{i // 250}.{i % 250}:8265",
                    accelerator=ACCELERATORS[i % len(ACCELERATORS)],
                    gpus=GPUS_PER_CLUSTER,
                    gpus_per_node=GPUS_PER_CLUSTER,
                    gpu_memory_gb=80,
                    price_per_gpu_hour=2.0,
                    labels={},
                    status="READY",
                    status_message="",
                    created_at=now,
                    updated_at=now,
                )
            )
        running, attempts = [], []
        for cluster_id in cluster_ids:
            used = 0
            while used < GPUS_PER_CLUSTER - 1 and rng.random() < 0.9:
                gpus = min(rng.choice([1, 2, 4]), GPUS_PER_CLUSTER - used)
                used += gpus
                job_id = new_id()
                started = now - timedelta(minutes=rng.randrange(1, 600))
                running.append(
                    job_row(
                        job_id,
                        "RUNNING",
                        gpus,
                        None,
                        rng.choice([None, 36_000, 86_400]),
                        started,
                        document,
                        fingerprint,
                    )
                )
                attempts.append(
                    {
                        "id": new_id(),
                        "job_id": job_id,
                        "number": 1,
                        "cluster_id": cluster_id,
                        "status": "RUNNING",
                        "reason": "",
                        "created_at": started,
                        "started_at": started,
                        "log_tail": "",
                    }
                )
        conn.execute(insert(Job), running)
        conn.execute(insert(JobAttempt), attempts)
        queued = [
            job_row(
                new_id(),
                "QUEUED",
                rng.choice([1, 1, 2, 2, 4, 8, 16]),
                rng.choice([None, None, "H100", "A10"]),
                rng.choice([None, 3600, 7200]),
                now - timedelta(seconds=jobs - i),
                document,
                fingerprint,
            )
            for i in range(jobs)
        ]
        for start in range(0, jobs, 5000):
            conn.execute(insert(Job), queued[start : start + 5000])
        conn.exec_driver_sql("ANALYZE")
    engine.dispose()


def timed(fn, repeat: int) -> tuple[list[float], object]:
    samples, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        samples.append(1000 * (time.perf_counter() - started))
    return samples, result


def report(label: str, samples: list[float]) -> float:
    median = statistics.median(samples)
    print(
        f"{label:<44} median {median:7.1f} ms   min {min(samples):7.1f}   max {max(samples):7.1f}"
    )
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    with ThrowawayPostgres() as pg:
        url = pg.create_database("bench")
        migrate.upgrade(url)
        fill(url, args.jobs, args.clusters)
        engine = make_engine(url)
        sessions = session_factory(engine)

        def read_queue():
            with sessions() as session, session.begin():
                return load_queue(session)

        def read_state():
            with sessions() as session, session.begin():
                return load_queue(session), cluster_states(session, utcnow())

        def full_pass():
            with sessions() as session:
                # Time the whole pass, then undo its writes so every repetition
                # starts from the same queue.
                original_begin = session.begin

                class RolledBack:
                    def __enter__(self_inner):
                        self_inner.tx = original_begin()
                        self_inner.tx.__enter__()
                        return session

                    def __exit__(self_inner, *exc):
                        self_inner.tx.rollback()
                        return False

                session.begin = RolledBack  # type: ignore[method-assign]
                return place_queued_jobs(session, utcnow())

        read_queue()  # warm caches and prepared statements
        base_samples, queue = timed(read_queue, args.repeat)
        (demands, clusters) = read_state()
        plan_samples, decision = timed(lambda: plan(demands, clusters), args.repeat)
        pass_samples, result = timed(full_pass, args.repeat)
        engine.dispose()

    free = sum(c.free for c in clusters)
    print(
        f"{len(queue)} queued jobs, {len(clusters)} clusters, {free} GPUs free, "
        f"{len(decision.placements)} placements per pass"
    )
    baseline = report("baseline: read the queued rows", base_samples)
    report("plan() over the queue (pure)", plan_samples)
    full = report("full pass (read, plan, write placements)", pass_samples)
    print(
        f"full pass = {full / baseline:.1f}x the baseline read; target < 200 ms: "
        f"{'met' if full < 200 else 'NOT met'}"
    )
    assert result.placed, "the pass placed nothing: the benchmark would not measure writes"


if __name__ == "__main__":
    main()
