"""Submission throughput and read latency of the real server on PostgreSQL.

Starts a throwaway PostgreSQL and ``trainplane server``, fills the jobs table,
then drives it from concurrent keep-alive connections on 127.0.0.1:

  1. baseline: ``GET /healthz`` (the HTTP stack with no database work)
  2. ``POST /v1/jobs`` for a fixed time: submissions/s, p50/p99 latency
  3. ``GET /v1/jobs/{id}`` on random jobs: p50/p99
  4. ``GET /v1/jobs?limit=50`` at random depths, with and without filters: p50/p99

Targets (2-core machine): >= 500 submissions/s; list page p99 < 50 ms with
100,000 jobs in the table. Submissions run from 16 connections, reads from 4
(``--concurrency``, ``--read-concurrency``); the server and PostgreSQL share
the machine's cores with the load generator.

    .venv/bin/python benchmarks/api_submit.py [--jobs 100000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from sqlalchemy import insert

from trainplane.db import migrate
from trainplane.db.base import utcnow
from trainplane.db.engine import make_engine
from trainplane.db.models import Job
from trainplane.ids import new_id
from trainplane.jobs.spec import parse_spec
from trainplane.services.jobs import spec_fingerprint
from trainplane.services.pagination import encode_cursor
from trainplane.testing.postgres import ThrowawayPostgres
from trainplane.testing.server import ServerProcess

SPEC = {
    "kind": "train",
    "name": "bench",
    "entrypoint": {"function": "train:train_loop", "args": {"epochs": 3}},
    "resources": {"gpus": 4, "gpus_per_node": 4},
    "strategy": {"type": "fsdp"},
    "precision": "bf16",
    "checkpoint": {"every_steps": 500, "keep_last": 3},
    "max_runtime": "24h",
}


class Connection:
    """A minimal HTTP/1.1 keep-alive client, so the load generator costs the
    2-core machine as little CPU as possible."""

    def __init__(self, port: int, authorization: str) -> None:
        self.port = port
        self.authorization = authorization
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: {self.authorization}\r\nContent-Length: {len(body)}\r\n"
        )
        if body:
            head += "Content-Type: application/json\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)
        status_line = await self.reader.readline()
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        payload = await self.reader.readexactly(length)
        return int(status_line.split()[1]), payload


async def drive(
    server: ServerProcess,
    make_request: Callable[[], tuple[str, str, bytes]],
    seconds: float,
    concurrency: int,
) -> tuple[list[float], int]:
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal errors
        connection = Connection(server.port, server.headers["Authorization"])
        while time.perf_counter() < deadline:
            method, path, body = make_request()
            started = time.perf_counter()
            status, _ = await connection.request(method, path, body)
            latencies.append(time.perf_counter() - started)
            errors += status >= 400

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, errors


def summarize(label: str, latencies: list[float], errors: int, seconds: float) -> dict:
    ordered = sorted(latencies)
    result = {
        "label": label,
        "requests": len(ordered),
        "per_second": len(ordered) / seconds,
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[int(0.99 * (len(ordered) - 1))],
        "errors": errors,
    }
    print(
        f"{label:<34} {result['per_second']:>9.0f}/s  p50 {result['p50_ms']:6.2f} ms  "
        f"p99 {result['p99_ms']:6.2f} ms  errors {errors}",
        flush=True,
    )
    return result


def fill(url: str, count: int) -> list[tuple[str, object]]:
    """Insert ``count`` jobs spread over the last 30 days; returns (id, created_at)."""
    document = parse_spec(SPEC).model_dump(mode="json")
    fingerprint = spec_fingerprint(document)
    engine = make_engine(url)
    start = utcnow() - timedelta(days=30)
    step = timedelta(days=30) / max(count, 1)
    statuses = ["SUCCEEDED"] * 6 + ["FAILED", "CANCELLED", "QUEUED", "RUNNING"]
    keys = []
    with engine.begin() as conn:
        for offset in range(0, count, 5000):
            rows = []
            for i in range(offset, min(count, offset + 5000)):
                created = start + step * i
                job_id = new_id()
                keys.append((job_id, created))
                rows.append(
                    {
                        "id": job_id,
                        "project_id": "0" * 26,
                        "name": f"bench-{i % 100}",
                        "kind": "train",
                        "status": random.choice(statuses),
                        "reason": "",
                        "priority": 50,
                        "gpus": 4,
                        "strategy": "fsdp",
                        "spec": document,
                        "spec_hash": fingerprint,
                        "submitted_by": "bench",
                        "idempotency_key": None,
                        "created_at": created,
                        "updated_at": created,
                    }
                )
            conn.execute(insert(Job), rows)
        conn.exec_driver_sql("ANALYZE")
    engine.dispose()
    return keys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs in the table before reads")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of each phase")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=16,
        help="concurrent connections for the submission phase",
    )
    parser.add_argument(
        "--read-concurrency",
        type=int,
        default=4,
        help="concurrent connections for the read phases (interactive load)",
    )
    parser.add_argument("--workers", type=int, default=2, help="server worker processes")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    with ThrowawayPostgres() as pg, tempfile.TemporaryDirectory() as home:
        url = pg.create_database("bench")
        migrate.upgrade(url)
        t0 = time.perf_counter()
        keys = fill(url, args.jobs)
        print(f"filled {args.jobs} jobs in {time.perf_counter() - t0:.1f}s", flush=True)
        env = {
            "TRAINPLANE_DATABASE_URL": url,
            "TRAINPLANE_HOME": home,
            "TRAINPLANE_DB_POOL_SIZE": str(args.concurrency),
        }
        with ServerProcess(env, workers=args.workers, own_token=True) as server:
            results = asyncio.run(run_phases(server, keys, args))

    by_label = {r["label"]: r for r in results}
    submit = by_label["POST /v1/jobs"]
    baseline = by_label["GET /healthz (baseline)"]
    list_p99 = max(r["p99_ms"] for r in results if r["label"].startswith("GET /v1/jobs?"))
    print()
    print(
        f"submissions/s: {submit['per_second']:.0f} (target >= 500) "
        f"= {submit['per_second'] / baseline['per_second']:.2f}x of the /healthz baseline"
    )
    print(
        f"list page p99 (worst variant): {list_p99:.2f} ms (target < 50 ms) "
        f"with {args.jobs} jobs in the table"
    )
    print(f"targets met: {submit['per_second'] >= 500 and list_p99 < 50}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


async def run_phases(
    server: ServerProcess, keys: list[tuple[str, object]], args: argparse.Namespace
) -> list[dict]:
    seconds, concurrency = args.seconds, args.concurrency
    body = json.dumps(SPEC).encode()
    # Warm up connections, caches and the server's code paths.
    await drive(server, lambda: ("GET", "/healthz", b""), 1.0, concurrency)
    await drive(server, lambda: ("POST", "/v1/jobs", body), 1.0, concurrency)

    def random_cursor() -> str:
        job_id, created = random.choice(keys)
        return encode_cursor(created, job_id)  # type: ignore[arg-type]

    phases: list[tuple[str, Callable[[], tuple[str, str, bytes]], float]] = [
        ("GET /healthz (baseline)", lambda: ("GET", "/healthz", b""), seconds),
        ("POST /v1/jobs", lambda: ("POST", "/v1/jobs", body), seconds),
        (
            "GET /v1/jobs/{id}",
            lambda: ("GET", f"/v1/jobs/{random.choice(keys)[0]}", b""),
            seconds / 2,
        ),
        (
            "GET /v1/jobs?limit=50 (first page)",
            lambda: ("GET", "/v1/jobs?limit=50", b""),
            seconds / 2,
        ),
        (
            "GET /v1/jobs?limit=50&cursor=..",
            lambda: ("GET", f"/v1/jobs?limit=50&cursor={random_cursor()}", b""),
            seconds / 2,
        ),
        (
            "GET /v1/jobs?status=..&cursor=..",
            lambda: ("GET", f"/v1/jobs?limit=50&status=SUCCEEDED&cursor={random_cursor()}", b""),
            seconds / 2,
        ),
        (
            "GET /v1/jobs?project=..&name=..",
            lambda: (
                "GET",
                f"/v1/jobs?limit=50&project=default&name=bench-{random.randrange(100)}",
                b"",
            ),
            seconds / 2,
        ),
    ]
    results = []
    for label, make_request, duration in phases:
        # Submissions and the baseline saturate the server; reads are measured
        # the way people read: a few clients at a time, not a flood.
        clients = (
            concurrency if label.startswith(("POST", "GET /healthz")) else args.read_concurrency
        )
        latencies, errors = await drive(server, make_request, duration, clients)
        results.append(summarize(label, latencies, errors, duration))
    return results


if __name__ == "__main__":
    main()
