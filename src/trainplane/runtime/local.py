"""Run a train function without Ray: in this process (one worker), or once per
process under ``torchrun`` (``torchrun --nproc-per-node N -m trainplane.runtime.local``).

The spec comes from ``TRAINPLANE_SPEC`` (JSON) or a file given as the first
argument, and is parsed once here (``jobs.spec.load_spec``). This is how a
one-worker job runs inside its driver, and how the runtime is measured and
checked on machines without Ray.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

import torch
import torch.distributed as dist

from trainplane.jobs.spec import FinetuneSpec, TrainSpec, load_spec
from trainplane.net import free_port
from trainplane.runtime import env as tp_env
from trainplane.runtime import process_groups
from trainplane.runtime.collective import barrier as bookkeeping_barrier
from trainplane.runtime.functions import run_rank
from trainplane.runtime.preemption import EXIT_PREEMPTED, Preempted
from trainplane.runtime.start_events import mark, mark_process_start
from trainplane.runtime.threads import threads_for_rank, usable_cpus, use_threads


def device_for(local_rank: int) -> torch.device:
    wanted = os.environ.get(tp_env.DEVICE)
    if wanted == "cuda" or (wanted is None and torch.cuda.is_available()):
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def run_local(spec: TrainSpec | FinetuneSpec) -> Any:
    """Join (or make) the process groups from torchrun's environment and run."""
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    device = device_for(local_rank)
    use_threads(
        threads_for_rank(
            spec,
            on_gpu=device.type == "cuda",
            local_world_size=local_world_size,
            cpus=usable_cpus(),
        )
    )
    created = False
    if not dist.is_initialized():
        if "MASTER_ADDR" not in os.environ:
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        process_groups.join(spec, device_type=device.type, rank=rank, world_size=world_size)
        created = True
    mark("rank joined process group")
    try:
        result = run_rank(
            spec,
            rank=rank,
            local_rank=local_rank,
            world_size=world_size,
            local_world_size=local_world_size,
            node_rank=int(os.environ.get("GROUP_RANK", 0)),
            device=device,
        )
        if created and world_size > 1:
            # Rank 0 may still be sending the result: the others wait on the
            # bookkeeping group, outside NCCL's watchdog. Then no rank tears
            # the training group down while another's collectives (a sharded
            # model's last gathers) may still be in flight: a gloo group
            # destroyed under pending work aborts the process.
            bookkeeping_barrier()
            dist.barrier()
        return result
    finally:
        if created:
            process_groups.leave()


def main(argv: list[str]) -> int:
    mark_process_start("rank process started")
    mark("rank process imported")
    try:
        spec = load_spec(_spec_document(argv))
        run_local(spec)
    except Preempted:
        return EXIT_PREEMPTED
    except Exception as exc:
        traceback.print_exc()
        _write_error_file(exc)
        return 1
    return 0


def _spec_document(argv: list[str]) -> Any:
    if argv:
        with open(argv[0]) as handle:
            return json.load(handle) if argv[0].endswith(".json") else _yaml(handle.read())
    return json.loads(os.environ[tp_env.SPEC])


def _write_error_file(exc: BaseException) -> None:
    path = os.environ.get(tp_env.ERROR_FILE)
    if path:
        with open(path, "w") as handle:
            handle.write(describe(exc))


def describe(exc: BaseException) -> str:
    """One line saying why: the exception's type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _yaml(text: str) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(text)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
