"""A train function that runs an example's train loop and measures the memory
its rank used, for checking the memory estimator (tests and benchmarks).

``entrypoint.args``: ``example`` (a folder of ``examples/`` with a
``train.py``), ``out`` (a folder: each rank writes ``rank-<n>.json`` there)
and the example's own arguments.

On a GPU the measure is exact: the peak of what PyTorch's allocator handed
out (``torch.cuda.max_memory_allocated``). On CPU it is the process's peak
resident memory less what it was before the example built anything, with
the strategy's libraries already imported: what training added.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import resource
from pathlib import Path
from typing import Any

import torch

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


# Big blocks straight from mmap: resident memory then follows the live
# tensors instead of what the allocator keeps for later.
MEASURING_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def probe_spec(
    example: str,
    args: dict[str, Any],
    out: Path,
    *,
    strategy: dict[str, Any],
    gpus: int,
    precision: str = "fp32",
) -> dict[str, Any]:
    """A job spec that runs :func:`measure` on ``example`` with ``args``."""
    return {
        "kind": "train",
        "name": "memory-probe",
        "entrypoint": {
            "function": "trainplane.testing.memory_probe:measure",
            "args": {**args, "example": example, "out": str(out)},
        },
        "resources": {"gpus": gpus},
        "strategy": strategy,
        "precision": precision,
    }


def _resident_bytes() -> int:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * resource.getpagesize()


def _peak_resident_bytes() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_peak_resident() -> None:
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # resets VmHWM to the current resident size


def _example(name: str) -> Any:
    path = EXAMPLES / name / "train.py"
    spec = importlib.util.spec_from_file_location(f"trainplane_example_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(ctx: Any) -> dict[str, Any]:
    args = dict(ctx.args)
    example = _example(args.pop("example"))
    out = Path(args.pop("out"))
    ctx.args = args
    # What the strategy imports is not the job's memory: import it first.
    library = {"deepspeed": "deepspeed", "fsdp": "torch.distributed.fsdp"}.get(ctx.strategy)
    if library:
        importlib.import_module(library)
    on_gpu = ctx.device.type == "cuda"
    gc.collect()
    if on_gpu:
        torch.cuda.reset_peak_memory_stats(ctx.device)
        before = torch.cuda.memory_allocated(ctx.device)
    else:
        before = _resident_bytes()
    prepare = ctx.prepare

    def prepare_then_reset_peak(*a: Any, **k: Any) -> Any:
        # Building the full model before sharding it is a transient peak the
        # estimate does not model: the steady state of training is measured.
        prepared = prepare(*a, **k)
        gc.collect()
        if on_gpu:
            torch.cuda.reset_peak_memory_stats(ctx.device)
        else:
            _reset_peak_resident()
        return prepared

    ctx.prepare = prepare_then_reset_peak
    result = example.train_loop(ctx)
    if on_gpu:
        used = torch.cuda.max_memory_allocated(ctx.device) - before
    else:
        used = _peak_resident_bytes() - before
    out.mkdir(parents=True, exist_ok=True)
    record = {"rank": ctx.rank, "peak_bytes": used, "on_gpu": on_gpu, "result": result}
    (out / f"rank-{ctx.rank}.json").write_text(json.dumps(record))
    return record
