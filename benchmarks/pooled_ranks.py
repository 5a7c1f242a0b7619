"""What the rank pool (runtime.rank_pool) changes for one job's ranks, apart
from everything else a start through Ray involves: the LM example's 2 ranks
(gloo, CPU), each started fresh (``python -m trainplane.runtime.local``, as a
Ray Train worker starts it with the pool off) or forked from a warm parent,
interleaved, in the same environment a Ray worker gives them
(``OMP_NUM_THREADS=1``) and the same session (as the keeper actor puts the
parent in the Ray node's). Prints steps/s after ``--skip`` steps and start ->
first step, medians of ``--repeats``.

    .venv/bin/python benchmarks/pooled_ranks.py --json          # ~3 min on 2 cores
    .venv/bin/python benchmarks/pooled_ranks.py --small --json  # the smoke run
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
import uuid
from pathlib import Path

from step_points import medians, print_table, read_points, summarise

from trainplane.net import free_port
from trainplane.runtime import rank_pool

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "lm"
SMALL_ARGS = {"global_batch": 4, "seq_len": 32, "d_model": 64, "sequences": 32}
IDLE = 120.0


def rank_envs(args: dict, metrics: Path) -> list[dict[str, str]]:
    spec = {
        "kind": "train",
        "name": "rank-pool",
        "entrypoint": {"function": "train:train_loop", "args": args},
        "resources": {"gpus": 2},
        "strategy": {"type": "ddp"},
    }
    common = {
        **os.environ,
        "TRAINPLANE_SPEC": json.dumps(spec),
        "TRAINPLANE_METRICS_FILE": str(metrics),
        "TRAINPLANE_DEVICE": "cpu",
        "PYTHONPATH": str(EXAMPLE),
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",  # what Ray gives a worker of one CPU
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "0",
        rank_pool.IDLE_ENV: f"{IDLE:g}",
    }
    return [{**common, "RANK": str(rank), "LOCAL_RANK": str(rank)} for rank in (0, 1)]


def fresh(envs: list[dict[str, str]]) -> list[int]:
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "trainplane.runtime.local"],
            env=env,
            cwd=EXAMPLE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        for env in envs
    ]
    return [process.wait() for process in processes]


def pooled(project: str, envs: list[dict[str, str]]) -> list[int]:
    ranks = [rank_pool.start_rank(project, env, str(EXAMPLE), IDLE) for env in envs]
    if any(rank is None for rank in ranks):
        raise RuntimeError("the pool's parent did not answer")
    codes = []
    for rank in ranks:
        assert rank is not None
        rank.stdout.read()
        codes.append(rank.wait())
    return codes


def start_parent(project: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    path = rank_pool.socket_path(project, env)
    parent = rank_pool._spawn_parent(path, IDLE, rank_pool.start_time_env(env), new_session=False)
    deadline = time.monotonic() + 120
    while not path.exists():
        if parent.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the pool's parent never listened")
        time.sleep(0.1)
    return parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--skip", type=int, default=10, help="warm-up steps left out of steps/s")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--small", action="store_true", help="a tiny model: the smoke run")
    parser.add_argument("--json", action="store_true", help="a JSON summary as the last line")
    options = parser.parse_args()
    args = {"steps": options.steps, **(SMALL_ARGS if options.small else {})}

    work = Path(tempfile.mkdtemp(prefix="tp-rank-pool-"))
    project = f"benchmark-{uuid.uuid4().hex[:8]}"
    parent = start_parent(project, rank_envs(args, work / "none")[0])
    results: dict[str, list[tuple[float, float]]] = {"fresh": [], "pool": []}
    try:
        for repeat in range(options.repeats):
            # Interleaved, each going first in turn, so drift hits both.
            order = ("fresh", "pool") if repeat % 2 == 0 else ("pool", "fresh")
            for way in order:
                metrics = work / f"{way}-{repeat}.jsonl"
                envs = rank_envs(args, metrics)
                started = time.time()
                codes = fresh(envs) if way == "fresh" else pooled(project, envs)
                if codes != [0, 0]:
                    raise RuntimeError(f"{way} ranks exited {codes}")
                results[way].append(summarise(read_points(metrics), started, options.skip))
    finally:
        parent.terminate()
        parent.wait(30)
        shutil.rmtree(work, ignore_errors=True)

    figures = medians(results)
    print(f"{options.steps} steps, 2 CPU ranks (gloo), median of {options.repeats}:")
    print_table(figures, {"fresh": "fresh rank processes", "pool": "forked from the pool"})
    if options.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
