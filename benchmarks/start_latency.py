"""How long a job takes to start on a warm local Ray cluster, through trainplane
and through the Ray Jobs API alone, in the same run.

A local Ray head (2 CPU slots) and a real ``trainplane server`` (API and
scheduler, default settings, SQLite store) run on 127.0.0.1. Each sample
submits a one-worker job whose first line is ``first line`` and measures, by
polling every 20 ms:

  - trainplane: POST /v1/jobs -> status RUNNING, and -> the line in its logs
  - Ray Jobs API alone, same command: submit_job -> RUNNING, -> the line in its logs

Target: trainplane within 1.5 s of the Ray Jobs API alone.

    .venv/bin/python benchmarks/start_latency.py [--samples 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from ray.job_submission import JobSubmissionClient

from trainplane.backends.local_ray import LocalRayHead
from trainplane.db import migrate
from trainplane.testing.clusters import register_local_cluster
from trainplane.testing.server import ServerProcess

LINE = "first line"
CODE = f"print('{LINE}', flush=True)"
POLL = 0.02


def until(check, timeout: float = 120.0) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if check():
            return time.perf_counter()
        time.sleep(POLL)
    raise TimeoutError("timed out")


def through_trainplane(url: str, http: httpx.Client) -> tuple[float, float]:
    spec = {
        "kind": "train",
        "name": "latency",
        "resources": {"gpus": 1},
        "entrypoint": {"command": ["python", "-c", CODE]},
    }
    t0 = time.perf_counter()
    job_id = http.post(f"{url}/v1/jobs", json=spec).json()["id"]
    running = until(
        lambda: http.get(f"{url}/v1/jobs/{job_id}").json()["status"] in ("RUNNING", "SUCCEEDED")
    )
    first = until(lambda: LINE in http.get(f"{url}/v1/jobs/{job_id}/logs").text)
    until(lambda: http.get(f"{url}/v1/jobs/{job_id}").json()["terminal"])
    return running - t0, first - t0


def through_ray(ray: JobSubmissionClient) -> tuple[float, float]:
    t0 = time.perf_counter()
    job_id = ray.submit_job(entrypoint=f'python -c "{CODE}"', entrypoint_num_cpus=1)
    running = until(lambda: str(ray.get_job_status(job_id)).endswith(("RUNNING", "SUCCEEDED")))
    first = until(lambda: LINE in ray.get_job_logs(job_id))
    until(lambda: str(ray.get_job_status(job_id)).endswith(("SUCCEEDED", "FAILED")))
    return running - t0, first - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=7)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tp-lat-", dir="/tmp"))
    os.environ["HOME"] = str(work)  # Ray writes under $HOME
    url_db = f"sqlite:///{work / 'trainplane.db'}"
    try:
        with LocalRayHead(work / "ray", slots=2) as head:
            migrate.upgrade(url_db)
            register_local_cluster(url_db, head.address, slots=2)
            env = {"TRAINPLANE_DATABASE_URL": url_db, "TRAINPLANE_HOME": str(work)}
            ray = JobSubmissionClient(head.address)
            with (
                ServerProcess(env, log_path=work / "server.log") as server,
                httpx.Client(timeout=30) as http,
            ):
                # Warm both paths: worker processes, runtime envs, caches.
                through_trainplane(server.url, http)
                through_ray(ray)
                tp, raw = [], []
                for _ in range(args.samples):
                    raw.append(through_ray(ray))
                    tp.append(through_trainplane(server.url, http))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def median(samples, index):
        return statistics.median(s[index] for s in samples)

    print(f"{args.samples} samples each, medians (seconds):")
    print(f"{'':28}{'submit->RUNNING':>18}{'submit->first line':>21}")
    rows = [("Ray Jobs API alone", raw), ("trainplane", tp)]
    for label, samples in rows:
        print(f"{label:28}{median(samples, 0):>18.2f}{median(samples, 1):>21.2f}")
    extra_running = median(tp, 0) - median(raw, 0)
    extra_first = median(tp, 1) - median(raw, 1)
    print(f"{'trainplane - Ray alone':28}{extra_running:>+18.2f}{extra_first:>+21.2f}")
    print(
        f"target: within 1.5 s of Ray alone: "
        f"{'met' if max(extra_running, extra_first) <= 1.5 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
