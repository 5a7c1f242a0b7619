"""Run as a script by test_gpu_devices.py, so that Ray ships ``probe`` by value:
a Ray Train worker group of GPU workers built as the runtime builds it
(runtime.ray_train), each worker recording what its rank process would be
started with and whether the worker itself opened a process group or a CUDA
context. Connects to RAY_ADDRESS; writes one JSON file per rank into argv[2],
and actors.json: the class names of the actors the run created."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = sys.argv[2] if __name__ == "__main__" else ""


def probe(config: dict[str, Any]) -> None:
    import ray.train

    from trainplane.runtime.devices import own_gpu_ids
    from trainplane.runtime.ray_train import rank_process_env
    from trainplane.runtime.rendezvous import meet

    context = ray.train.get_context()
    meeting = meet(context)
    env = rank_process_env(config, context, meeting)
    record = {
        "rank": int(env["RANK"]),
        "local_rank": int(env["LOCAL_RANK"]),
        "visible": env.get("CUDA_VISIBLE_DEVICES"),
        "own": list(own_gpu_ids()),
        "master": [env["MASTER_ADDR"], env["MASTER_PORT"]],
        # Looked up, not imported: a worker that never imported torch opened
        # neither (and the probe stays quick).
        "process_group": _loaded("torch.distributed", "is_initialized"),
        "cuda_initialized": _loaded("torch.cuda", "is_initialized"),
    }
    (Path(OUT) / f"{record['rank']}.json").write_text(json.dumps(record))


def _loaded(module: str, check: str) -> bool:
    loaded = sys.modules.get(module)
    return bool(loaded is not None and getattr(loaded, check)())


if __name__ == "__main__":
    import ray

    from trainplane.jobs.spec import parse_spec
    from trainplane.runtime.ray_train import ray_train_trainer

    workers = int(sys.argv[1])
    ray.init()
    spec = parse_spec(
        {
            "kind": "train",
            "name": "devices-probe",
            "entrypoint": {"command": ["true"]},
            "resources": {"gpus": workers, "cpus_per_worker": 1},
        }
    )
    ray_train_trainer(spec, on_gpu=True, restarts_left=0, worker=probe).fit()
    # Every actor this run created, dead or alive (runtime.lean_trainer).
    from ray.util.state import list_actors

    job = ray.get_runtime_context().get_job_id()
    created = list_actors(filters=[("job_id", "=", job)], limit=1000, raise_on_missing_output=False)
    (Path(OUT) / "actors.json").write_text(json.dumps(sorted({a.class_name for a in created})))
