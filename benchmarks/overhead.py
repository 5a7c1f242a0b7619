"""What trainplane costs a training run, against bare ``torchrun``, in one run.

The same model (the LM of examples/lm), data, batch and step count, on 2 CPU
workers (gloo), three ways:

  - bare torchrun: a plain PyTorch DDP loop (benchmarks/bare_lm.py)
  - trainplane runtime under torchrun: the example's train function through
    TrainContext (strategy ddp), no Ray, no control plane
  - trainplane service: the same job submitted to a running ``trainplane
    server`` with a local Ray head (2 CPU slots), through Ray Train

Each prints steady-state steps/s (from per-step timestamps, over the same
window: after the first ``--skip`` steps to the last) and the time from launch
(or submit) to the first finished step. All three timestamp each step on rank
0 the same way (a clock read when the step ends, written out later), so the
measurement costs each the same. Targets: the service's steps/s >= 0.95 x
bare torchrun's, the runtime's >= 0.98 x, and the service's first step
within 2 x bare's. ``--json`` prints, as the last line,
``{"bare": {"steps_per_s", "first_step_s"}, "runtime": {...}, "service": {...}}``.

    .venv/bin/python benchmarks/overhead.py [--steps 300] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from step_points import medians, print_table, read_points, summarise

from trainplane.backends.local_ray import LocalRayHead
from trainplane.cli.waiting import POLL_SECONDS as WAIT_POLL_SECONDS
from trainplane.db import migrate
from trainplane.testing.clusters import register_local_cluster
from trainplane.testing.server import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "lm"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]


def spec(args: dict, metrics: Path) -> dict:
    return {
        "kind": "train",
        "name": "overhead",
        "entrypoint": {
            "function": "train:train_loop",
            "args": args,
            "working_dir": str(EXAMPLE),
            "env": {"TRAINPLANE_METRICS_FILE": str(metrics)},
        },
        "resources": {"gpus": 2},
        "strategy": {"type": "ddp"},
    }


def bare(work: Path, args: dict) -> tuple[list[tuple[int, float]], float]:
    metrics = work / f"bare-{time.monotonic_ns()}.jsonl"
    started = time.time()
    subprocess.run(
        [
            *TORCHRUN,
            str(ROOT / "benchmarks" / "bare_lm.py"),
            "--metrics-file",
            str(metrics),
            "--args",
            json.dumps(args),
        ],
        check=True,
        capture_output=True,
    )
    return read_points(metrics), started


def runtime_under_torchrun(work: Path, args: dict) -> tuple[list[tuple[int, float]], float]:
    metrics = work / f"local-{time.monotonic_ns()}.jsonl"
    env = {
        **os.environ,
        "TRAINPLANE_SPEC": json.dumps(spec(args, metrics)),
        "TRAINPLANE_METRICS_FILE": str(metrics),
        "PYTHONPATH": str(EXAMPLE),
    }
    started = time.time()
    subprocess.run(
        [*TORCHRUN, "-m", "trainplane.runtime.local"],
        check=True,
        capture_output=True,
        env=env,
        cwd=EXAMPLE,
    )
    return read_points(metrics), started


def through_service(
    url: str, http: httpx.Client, work: Path, args: dict
) -> tuple[list[tuple[int, float]], float]:
    metrics = work / f"service-{time.monotonic_ns()}.jsonl"
    started = time.time()
    answer = http.post(f"{url}/v1/jobs", json=spec(args, metrics))
    if answer.status_code != 201:
        raise RuntimeError(f"submit refused ({answer.status_code}): {answer.text}")
    job = answer.json()
    while True:
        detail = http.get(f"{url}/v1/jobs/{job['id']}").json()
        if detail["terminal"]:
            break
        # As `trainplane submit --wait` does (cli.waiting): a request costs
        # the server CPU that the ranks share, and polling five times a
        # second took a few percent of the measured steps.
        time.sleep(WAIT_POLL_SECONDS)
    if detail["status"] != "SUCCEEDED":
        logs = http.get(f"{url}/v1/jobs/{job['id']}/logs").text
        raise RuntimeError(f"the benchmark job ended {detail['status']}:\n{logs[-3000:]}")
    return read_points(metrics), started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--skip", type=int, default=10, help="warm-up steps left out of steps/s")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="a JSON summary as the last line")
    options = parser.parse_args()
    args = {"steps": options.steps}

    work = Path(tempfile.mkdtemp(prefix="tp-overhead-", dir="/tmp"))
    os.environ["HOME"] = str(work)  # Ray writes under $HOME
    db = f"sqlite:///{work / 'trainplane.db'}"
    results: dict[str, list[tuple[float, float]]] = {"bare": [], "runtime": [], "service": []}
    try:
        with LocalRayHead(work / "ray", slots=2) as head:
            migrate.upgrade(db)
            register_local_cluster(db, head.address, slots=2)
            env = {
                "TRAINPLANE_DATABASE_URL": db,
                "TRAINPLANE_HOME": str(work),
                "TRAINPLANE_SERVER_PATHS": str(EXAMPLE),  # the example is shipped from here
            }
            with (
                ServerProcess(env, log_path=work / "server.log", own_token=True) as server,
                httpx.Client(headers=server.headers, timeout=30) as http,
            ):
                through_service(server.url, http, work, {"steps": 20})  # warm Ray's caches
                for _ in range(options.repeats):  # interleaved, so drift hits all three
                    results["bare"].append(summarise(*bare(work, args), options.skip))
                    results["runtime"].append(
                        summarise(*runtime_under_torchrun(work, args), options.skip)
                    )
                    results["service"].append(
                        summarise(*through_service(server.url, http, work, args), options.skip)
                    )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    figures = medians(results)
    print(f"{options.steps} steps, 2 CPU workers (gloo), median of {options.repeats}:")
    labels = {
        "bare": "bare torchrun (plain PyTorch)",
        "runtime": "trainplane runtime, torchrun",
        "service": "trainplane service (Ray Train)",
    }
    print_table(figures, labels)
    rates = {way: figures[way]["steps_per_s"] / figures["bare"]["steps_per_s"] for way in labels}
    first = figures["service"]["first_step_s"] / figures["bare"]["first_step_s"]
    targets = {
        "service steps/s >= 0.95 x bare": rates["service"] >= 0.95,
        "runtime steps/s >= 0.98 x bare": rates["runtime"] >= 0.98,
        "service first step <= 2 x bare's": first <= 2,
    }
    for target, met in targets.items():
        print(f"target: {target}: {'met' if met else 'NOT met'}")
    if options.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
