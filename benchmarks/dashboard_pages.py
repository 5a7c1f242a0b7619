"""Dashboard page times with a full database: every page under 300 ms of
server time with 10,000 jobs.

Starts a throwaway PostgreSQL and ``trainplane server`` (API only, so nothing
changes the data while it is measured), fills it with ``--jobs`` jobs over
the last 30 days in 8 projects, each finished or running job with an attempt
on one of 3 priced clusters, 3 events per job, and one job with 3 attempts,
2,000 metric points and 30 events. Then it loads each page ``--requests``
times from one keep-alive connection, as one person clicking around would.

Server time is the page handler's own measure (its ``Server-Timing``
header: the in-process API calls and the rendering); wall time adds HTTP and
the client. The baseline is the JSON API call the jobs page is built from,
``GET /v1/jobs?limit=50``, measured in the same run.

    .venv/bin/python benchmarks/dashboard_pages.py [--jobs 10000] [--requests 20]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import timedelta

import httpx
from sqlalchemy import insert

from trainplane.db import migrate
from trainplane.db.base import utcnow
from trainplane.db.engine import make_engine
from trainplane.db.models import Cluster, Job, JobAttempt, JobEvent, JobMetric, Project
from trainplane.ids import new_id
from trainplane.jobs.spec import parse_spec
from trainplane.services.jobs import spec_fingerprint
from trainplane.testing.postgres import ThrowawayPostgres
from trainplane.testing.server import ServerProcess

TARGET_MS = 300.0
PROJECTS = [f"team-{n}" for n in range(8)]
STATUSES = ["SUCCEEDED"] * 6 + ["FAILED", "CANCELLED", "QUEUED", "RUNNING"]
BATCH = 2000
ATTEMPT_STATUS = {"SUCCEEDED": "SUCCEEDED", "FAILED": "FAILED", "CANCELLED": "STOPPED"}


def spec(project: str, index: int) -> dict:
    return parse_spec(
        {
            "kind": "train",
            "name": f"bench-{index % 100}",
            "project": project,
            "entrypoint": {"function": "train:train_loop", "args": {"lr": 0.001 * (index % 7)}},
            "resources": {"gpus": 4, "gpus_per_node": 4},
            "strategy": {"type": "fsdp"},
            "checkpoint": {"every_steps": 500, "keep_last": 3},
            "max_runtime": "24h",
            "tracking": {"experiment": f"exp-{index % 12}"},
        }
    ).model_dump(mode="json")


def job_row(
    job_id: str, project_id: str, name: str, status: str, document: dict, **times: object
) -> dict:
    """A jobs row of 4 GPUs with FSDP; ``times``: created_at, started_at, finished_at."""
    created = times["created_at"]
    return {
        "id": job_id,
        "project_id": project_id,
        "name": name,
        "kind": "train",
        "status": status,
        "reason": f"{status.lower()} on cluster gpu-0",
        "priority": 50,
        "gpus": 4,
        "gpus_per_node": 4,
        "strategy": "fsdp",
        "spec": document,
        "spec_hash": spec_fingerprint(document),
        "submitted_by": "bench",
        "updated_at": created,
        **times,
    }


def fill(url: str, count: int) -> tuple[str, str]:
    """Fill the database; returns the ids of the two jobs the detail and
    compare pages show."""
    engine = make_engine(url)
    now = utcnow()
    start = now - timedelta(days=30)
    step = timedelta(days=30) / max(count, 1)
    with engine.begin() as conn:
        projects = {name: new_id() for name in PROJECTS}
        conn.execute(
            insert(Project),
            [
                {"id": i, "name": n, "description": "", "created_at": start}
                for n, i in projects.items()
            ],
        )
        clusters = [new_id() for _ in range(3)]
        conn.execute(
            insert(Cluster),
            [
                {
                    "id": cluster_id,
                    "name": f"gpu-{n}",
                    "address": f"http://127.0.0.1:{9 + n}",
                    "accelerator": "H100",
                    "gpus": 64,
                    "gpus_per_node": 8,
                    "gpu_memory_gb": 80,
                    "price_per_gpu_hour": 2.5 + n,
                    "labels": {},
                    "status": "READY",
                    "status_message": "",
                    "created_at": start,
                    "updated_at": start,
                }
                for n, cluster_id in enumerate(clusters)
            ],
        )
        documents = {(p, i): spec(p, i) for p in PROJECTS for i in range(100)}
        for offset in range(0, count, BATCH):
            jobs, attempts, events = [], [], []
            for i in range(offset, min(count, offset + BATCH)):
                project = PROJECTS[i % len(PROJECTS)]
                document = documents[(project, i % 100)]
                status = random.choice(STATUSES)
                created = start + step * i
                began = created + timedelta(minutes=2)
                ended = began + timedelta(minutes=random.randint(5, 240))
                job_id = new_id()
                terminal = status in ("SUCCEEDED", "FAILED", "CANCELLED")
                jobs.append(
                    job_row(
                        job_id,
                        projects[project],
                        document["name"],
                        status,
                        document,
                        created_at=created,
                        started_at=None if status == "QUEUED" else began,
                        finished_at=ended if terminal else None,
                    )
                )
                if status != "QUEUED":
                    attempts.append(
                        {
                            "id": new_id(),
                            "job_id": job_id,
                            "number": 1,
                            "cluster_id": clusters[i % 3],
                            "status": ATTEMPT_STATUS.get(status, "RUNNING"),
                            "created_at": began,
                            "started_at": began,
                            "finished_at": ended if terminal else None,
                        }
                    )
                for n, to in enumerate(
                    ["QUEUED", "STARTING", status][: 1 if status == "QUEUED" else 3]
                ):
                    events.append(
                        {
                            "job_id": job_id,
                            "created_at": created + timedelta(seconds=n),
                            "from_status": None if n == 0 else "QUEUED",
                            "to_status": to,
                            "reason": "bench",
                            "message": "",
                            "actor": "bench",
                        }
                    )
            conn.execute(insert(Job), jobs)
            if attempts:
                conn.execute(insert(JobAttempt), attempts)
            conn.execute(insert(JobEvent), events)
        shown = [new_id(), new_id()]
        for n, job_id in enumerate(shown):
            document = documents[(PROJECTS[0], n)]
            began = now - timedelta(hours=3)
            conn.execute(
                insert(Job),
                [
                    job_row(
                        job_id,
                        projects[PROJECTS[0]],
                        f"shown-{n}",
                        "RUNNING",
                        document,
                        created_at=began,
                        started_at=began,
                    )
                ],
            )
            attempt_ids = [new_id() for _ in range(3)]
            conn.execute(
                insert(JobAttempt),
                [
                    {
                        "id": attempt_id,
                        "job_id": job_id,
                        "number": k + 1,
                        "cluster_id": clusters[0],
                        "status": "RUNNING" if k == 2 else "LOST",
                        "created_at": began + timedelta(hours=k),
                        "started_at": began + timedelta(hours=k),
                        "finished_at": None if k == 2 else began + timedelta(hours=k + 1),
                        "reason": "bench",
                    }
                    for k, attempt_id in enumerate(attempt_ids)
                ],
            )
            conn.execute(
                insert(JobEvent),
                [
                    {
                        "job_id": job_id,
                        "created_at": began + timedelta(minutes=k),
                        "from_status": "RUNNING",
                        "to_status": "RESTARTING" if k % 2 else "RUNNING",
                        "reason": f"event {k}",
                        "message": "",
                        "actor": "bench",
                    }
                    for k in range(30)
                ],
            )
            conn.execute(
                insert(JobMetric),
                [
                    {
                        "job_id": job_id,
                        "attempt_id": attempt_ids[2],
                        "attempt": 3,
                        "step": s,
                        "recorded_at": began + timedelta(seconds=s),
                        "values": {"loss": 3.0 / (1 + s / 200), "samples_per_s": 1200.0},
                    }
                    for s in range(1, 2001)
                ],
            )
        conn.exec_driver_sql("ANALYZE")
    engine.dispose()
    return shown[0], shown[1]


def measure(client: httpx.Client, path: str, requests: int) -> dict:
    for _ in range(2):
        client.get(path)
    server, wall = [], []
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get(path)
        wall.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (path, response.status_code, response.text[:500])
        timing = response.headers.get("server-timing", "")
        if "dur=" in timing:
            server.append(float(timing.split("dur=")[1]))
    return {
        "path": path,
        "server_p50": statistics.median(server) if server else None,
        "server_p95": sorted(server)[int(0.95 * (len(server) - 1))] if server else None,
        "wall_p50": statistics.median(wall),
        "wall_p95": sorted(wall)[int(0.95 * (len(wall) - 1))],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=20, help="loads of each page")
    args = parser.parse_args()
    with ThrowawayPostgres() as pg, tempfile.TemporaryDirectory() as home:
        url = pg.create_database("dash")
        migrate.upgrade(url)
        t0 = time.perf_counter()
        first, second = fill(url, args.jobs)
        print(f"filled {args.jobs} jobs in {time.perf_counter() - t0:.1f}s", flush=True)
        env = {"TRAINPLANE_DATABASE_URL": url, "TRAINPLANE_HOME": home}
        with (
            ServerProcess(env, args=("--no-scheduler",), own_token=True) as server,
            httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as client,
        ):
            cursor = client.get("/v1/jobs", params={"limit": 50}).json()["next_cursor"]
            paths = [
                "/v1/jobs?limit=50",
                "/",
                "/?status=SUCCEEDED",
                f"/?project={PROJECTS[3]}",
                f"/?cursor={cursor}",
                "/fragments/jobs",
                f"/jobs/{first}",
                f"/fragments/jobs/{first}",
                "/clusters",
                "/v1/usage",
                "/usage",
                "/usage?days=90",
                f"/compare?ids={first},{second}",
                "/submit",
            ]
            results = [measure(client, path, args.requests) for path in paths]
    baseline = results[0]["wall_p50"]
    heads = ("server p50", "server p95", "wall p50", "wall p95", "x base")
    print(f"\n{'page':<44} " + " ".join(f"{h:>10}" for h in heads))
    for r in results:
        server_p50 = f"{r['server_p50']:.1f}" if r["server_p50"] is not None else "-"
        server_p95 = f"{r['server_p95']:.1f}" if r["server_p95"] is not None else "-"
        print(
            f"{r['path'][:44]:<44} {server_p50:>10} {server_p95:>10} "
            f"{r['wall_p50']:>10.1f} {r['wall_p95']:>10.1f} {r['wall_p50'] / baseline:>10.2f}"
        )
    pages = [r for r in results if r["server_p95"] is not None]
    worst = max(pages, key=lambda r: r["server_p95"])
    met = worst["server_p95"] < TARGET_MS
    print(
        f"\nslowest page: {worst['path']} at {worst['server_p95']:.1f} ms server p95 "
        f"(target < {TARGET_MS:.0f} ms) with {args.jobs} jobs; baseline "
        f"GET /v1/jobs?limit=50 {baseline:.1f} ms wall p50"
    )
    print(f"targets met: {met}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
