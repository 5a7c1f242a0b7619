"""Where a job's start time goes: submit -> first finished step, stage by stage,
on a warm local Ray cluster, against bare ``torchrun``'s launch -> first step.

A local Ray head (2 CPU slots) and a real ``trainplane server`` (API and
scheduler, default settings, SQLite store) run on 127.0.0.1. Each sample
submits the job of ``benchmarks/overhead.py`` (the LM of examples/lm, strategy
ddp, 2 CPU workers through Ray Train), a few steps long, with
``TRAINPLANE_START_EVENTS_FILE`` set: the driver, the Ray Train workers and
the rank processes append their milestones to it (runtime.start_events). The
stages, in seconds since the submit (the last of the ranks where there are
several):

  placed            the scheduler made the attempt (its row's created_at)
  ray accepted      the Ray job exists (Ray's JobInfo.start_time)
  driver started    the driver process was created (runtime env ready)
  driver imported   the driver's imports are done
  driver on Ray     the driver joined the cluster (ray.init)
  controller up     Ray Train's controller actor runs
  group scheduling  the controller asks for the worker group's placement
  group started     the worker group is placed and set up (controller: running)
  workers running   every Ray Train worker runs its function (group placed)
  ranks started     every rank process was created
  ranks imported    every rank process has imported torch and trainplane
                    (forked from the warm parent of runtime.rank_pool: at once)
  ranks joined      every rank joined the job's process group
  first step        the first step finished (the metrics file's first line)

A first job warms Ray (worker processes, runtime env caches) and is not
counted; then ``--samples`` jobs, one at a time, and as many bare torchrun
launches interleaved. Medians are printed; ``--json`` adds, as the last
stdout line, ``{"stages": {name: seconds}, "bare_first_step_s": x,
"service_first_step_s": y, "ratio": y / x}``.

    .venv/bin/python benchmarks/start_latency.py [--samples 5] [--json] [--rank-pool-idle 0]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC
from pathlib import Path

import httpx
from ray.job_submission import JobSubmissionClient
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from trainplane.backends.local_ray import LocalRayHead
from trainplane.db import migrate
from trainplane.db.models import JobAttempt
from trainplane.runtime.start_events import START_EVENTS_FILE
from trainplane.testing.clusters import register_local_cluster
from trainplane.testing.server import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "lm"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
STEPS = 5
# (stage, event in the events file): the latest of the processes that mark it.
EVENT_STAGES = [
    ("driver started", "driver started"),
    ("driver imported", "driver imported"),
    ("driver on Ray", "driver joined Ray"),
    ("controller up", "controller running"),
    ("group scheduling", "controller SchedulingState"),
    ("group started", "controller RunningState"),
    ("workers running", "worker running"),
    ("ranks started", "rank process started"),
    ("ranks imported", "rank process imported"),
    ("ranks joined", "rank joined process group"),
]
STAGES = ["placed", "ray accepted", *(s for s, _ in EVENT_STAGES), "first step"]


def spec(metrics: Path, events: Path) -> dict:
    return {
        "kind": "train",
        "name": "start-latency",
        "entrypoint": {
            "function": "train:train_loop",
            "args": {"steps": STEPS},
            "working_dir": str(EXAMPLE),
            "env": {"TRAINPLANE_METRICS_FILE": str(metrics), START_EVENTS_FILE: str(events)},
        },
        "resources": {"gpus": 2},
        "strategy": {"type": "ddp"},
    }


def first_point(path: Path) -> float:
    return json.loads(path.read_text().splitlines()[0])["time"]


def bare_first_step(work: Path) -> float:
    metrics = work / f"bare-{time.monotonic_ns()}.jsonl"
    started = time.time()
    script = str(ROOT / "benchmarks" / "bare_lm.py")
    args = json.dumps({"steps": STEPS})
    command = [*TORCHRUN, script, "--metrics-file", str(metrics), "--args", args]
    subprocess.run(command, check=True, capture_output=True)
    return first_point(metrics) - started


def service_stages(
    url: str, http: httpx.Client, ray: JobSubmissionClient, db: str, work: Path
) -> dict[str, float]:
    """One job's stages, in seconds since its submit."""
    stamp = time.monotonic_ns()
    metrics, events = work / f"metrics-{stamp}.jsonl", work / f"events-{stamp}.jsonl"
    started = time.time()
    answer = http.post(f"{url}/v1/jobs", json=spec(metrics, events))
    if answer.status_code != 201:
        raise RuntimeError(f"submit refused ({answer.status_code}): {answer.text}")
    job_id = answer.json()["id"]
    while not (detail := http.get(f"{url}/v1/jobs/{job_id}").json())["terminal"]:
        time.sleep(0.2)
    if detail["status"] != "SUCCEEDED":
        logs = http.get(f"{url}/v1/jobs/{job_id}/logs").text
        raise RuntimeError(f"the job ended {detail['status']}:\n{logs[-3000:]}")
    with Session(create_engine(db)) as session:
        attempt = session.scalars(select(JobAttempt).where(JobAttempt.job_id == job_id)).one()
        attempt_id, placed = attempt.id, attempt.created_at
    at = {"placed": placed.replace(tzinfo=placed.tzinfo or UTC).timestamp()}
    at["ray accepted"] = ray.get_job_info(attempt_id).start_time / 1000
    # Each process's first mark of an event (the controller's states recur),
    # then the latest of the processes (the group is up when its last rank is).
    firsts: dict[tuple[str, int], float] = {}
    for line in events.read_text().splitlines():
        mark = json.loads(line)
        firsts.setdefault((mark["event"], mark["pid"]), mark["time"])
    marks: dict[str, float] = {}
    for (event, _), when in firsts.items():
        marks[event] = max(marks.get(event, 0.0), when)
    for stage, event in EVENT_STAGES:
        at[stage] = marks[event]
    at["first step"] = first_point(metrics)
    return {stage: at[stage] - started for stage in STAGES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="a JSON summary as the last line")
    parser.add_argument(
        "--rank-pool-idle",
        type=float,
        default=300.0,
        help="the server's rank_pool_idle_seconds (0: rank processes started without the pool)",
    )
    options = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tp-lat-", dir="/tmp"))
    os.environ["HOME"] = str(work)  # Ray writes under $HOME
    db = f"sqlite:///{work / 'trainplane.db'}"
    samples: list[dict[str, float]] = []
    bare: list[float] = []
    try:
        with LocalRayHead(work / "ray", slots=2) as head:
            migrate.upgrade(db)
            register_local_cluster(db, head.address, slots=2)
            env = {
                "TRAINPLANE_DATABASE_URL": db,
                "TRAINPLANE_HOME": str(work),
                "TRAINPLANE_SERVER_PATHS": str(EXAMPLE),  # the example is shipped from here
                "TRAINPLANE_RANK_POOL_IDLE_SECONDS": f"{options.rank_pool_idle:g}",
            }
            ray = JobSubmissionClient(head.address)
            with (
                ServerProcess(env, log_path=work / "server.log", own_token=True) as server,
                httpx.Client(headers=server.headers, timeout=30) as http,
            ):
                service_stages(server.url, http, ray, db, work)  # warm Ray's caches
                for _ in range(options.samples):  # interleaved, so drift hits both
                    bare.append(bare_first_step(work))
                    samples.append(service_stages(server.url, http, ray, db, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    stages = {stage: statistics.median(s[stage] for s in samples) for stage in STAGES}
    bare_first = statistics.median(bare)
    pool = f"rank pool {'off' if not options.rank_pool_idle else 'on'}"
    print(f"{options.samples} samples, medians, seconds since submit (2 CPU workers, {pool}):")
    print(f"{'stage':18}{'at':>8}{'took':>8}")
    previous = 0.0
    for stage, at in stages.items():
        print(f"{stage:18}{at:>8.2f}{at - previous:>8.2f}")
        previous = at
    ratio = stages["first step"] / bare_first
    print(f"bare torchrun, launch -> first step: {bare_first:.2f} s")
    print(f"service / bare: {ratio:.2f} (target <= 2: {'met' if ratio <= 2 else 'NOT met'})")
    if options.json:
        summary = {
            "stages": {k: round(v, 3) for k, v in stages.items()},
            "bare_first_step_s": round(bare_first, 3),
            "service_first_step_s": round(stages["first step"], 3),
            "ratio": round(ratio, 3),
        }
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
