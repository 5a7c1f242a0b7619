"""The entrypoint of every attempt's Ray job: ``python -m trainplane.runtime.driver``.

It reads the job's spec from the environment, places the gang of workers and
runs the job's command on each with torchrun's environment. Its exit code is
the job's: 0 when every rank succeeded, otherwise the first failing rank's code.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from typing import Any

from trainplane.runtime import env as tp_env
from trainplane.runtime.gang import GangShape
from trainplane.runtime.processes import die_with_parent, forward_output

# The driver's own failures, distinct from a user command's exit code.
EXIT_BAD_SPEC = 64
EXIT_UNSUPPORTED = 65
LOG_GRACE_SECONDS = 1.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def command_of(entrypoint: dict[str, Any]) -> list[str] | None:
    if entrypoint.get("command"):
        return list(entrypoint["command"])
    if entrypoint.get("script"):
        return ["python", entrypoint["script"]]
    return None


def main() -> int:
    try:
        spec = json.loads(os.environ[tp_env.SPEC])
        accelerator = os.environ.get(tp_env.ACCELERATOR, "cpu")
    except (KeyError, ValueError) as exc:
        print(f"trainplane: the attempt carries no readable spec ({exc})", flush=True)
        return EXIT_BAD_SPEC
    argv = command_of(spec.get("entrypoint") or {})
    if argv is None:
        print(
            "trainplane: only command and script entrypoints run on this version of the runtime",
            flush=True,
        )
        return EXIT_UNSUPPORTED

    resources = spec["resources"]
    on_gpu = accelerator.lower() != "cpu"
    shape = GangShape(
        workers=resources["gpus"],
        workers_per_node=resources.get("gpus_per_node"),
        # On a cpu cluster a "GPU" is a worker slot of one CPU.
        cpus_per_worker=resources.get("cpus_per_worker", 1) if on_gpu else 1,
        gpu=on_gpu,
    )
    backend = "nccl" if on_gpu else "gloo"
    common_env = {
        tp_env.DIST_BACKEND: backend,
        tp_env.DEVICE: "cuda" if on_gpu else "cpu",
    }
    if not on_gpu:
        common_env["OMP_NUM_THREADS"] = str(max(1, int(resources.get("cpus_per_worker", 1))))
    if shape.workers == 1:
        # The driver was given the one worker's resources: run it right here,
        # without starting Ray in this process.
        print(f"trainplane: starting 1 {'GPU' if on_gpu else 'CPU'} worker ({backend})", flush=True)
        code = run_inline(argv, common_env)
        print(f"trainplane: worker finished with exit code {code}", flush=True)
        return code

    import ray

    from trainplane.runtime.workers import WorkerGroup

    ray.init(log_to_driver=True, logging_level=logging.WARNING)
    print(
        f"trainplane: starting {shape.workers} {'GPU' if on_gpu else 'CPU'} workers "
        f"({backend}) on {shape.nodes} node(s)",
        flush=True,
    )
    group = WorkerGroup(shape)
    try:
        group.start()
        code = group.run(argv, common_env)
    finally:
        group.stop()
    # Worker output reaches this log through Ray's log monitor, a moment behind.
    time.sleep(LOG_GRACE_SECONDS)
    print(f"trainplane: workers finished with exit code {code}", flush=True)
    return code


def run_inline(argv: list[str], common_env: dict[str, str]) -> int:
    env = {
        **os.environ,
        **common_env,
        **tp_env.torchrun_env(
            rank=0,
            local_rank=0,
            world_size=1,
            local_world_size=1,
            group_rank=0,
            master_addr="127.0.0.1",
            master_port=free_port(),
        ),
        "PYTHONUNBUFFERED": "1",
    }
    process = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=die_with_parent,
    )
    forward_output(process, rank=0)
    return process.wait()


if __name__ == "__main__":
    sys.exit(main())
