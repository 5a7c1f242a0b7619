"""What trainplane's runtime costs a training run on one GPU, against bare
``torchrun``: the GPU suite's LM (examples/lm, ~270M parameters, bf16), the
same data, batch and steps, two ways, interleaved:

  - bare torchrun: a plain PyTorch loop (benchmarks/bare_lm.py)
  - trainplane runtime under torchrun: the example's train function through
    TrainContext (strategy ddp, as a one-GPU job runs), no Ray, no control
    plane

Each prints steady-state steps/s (after ``--skip`` steps) and launch -> first
step, medians of ``--repeats``. It needs neither Ray nor a control plane
(benchmarks/overhead.py measures the whole service on CPU workers).

    python benchmarks/gpu_overhead.py                       # one NVIDIA GPU, ~2 min on an H200
    python benchmarks/gpu_overhead.py --device cpu --small  # a smoke run anywhere
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpu_check import one_gpu_lm_spec
from step_points import medians, print_table, read_points, summarise

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "lm"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]

# The GPU suite's LM (gpu_suite.py), and a tiny one for the smoke run.
GPU_ARGS = {"global_batch": 16, "seq_len": 1024, "vocab": 32768, "d_model": 1024}
GPU_ARGS |= {"layers": 16, "heads": 16, "sequences": 768, "lr": 3e-4}
SMALL_ARGS = {"global_batch": 4, "seq_len": 32, "d_model": 64, "sequences": 32}


def environment(device: str) -> dict[str, str]:
    env = {**os.environ, "TRAINPLANE_DEVICE": device}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT / "src"), str(EXAMPLE), os.environ.get("PYTHONPATH")])
    )
    return env


def run(command: list[str], env: dict[str, str], cwd: Path) -> None:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{command[-1]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")


def bare(work: Path, args: dict, precision: str, device: str) -> tuple[list, float]:
    metrics = work / f"bare-{time.monotonic_ns()}.jsonl"
    command = [*TORCHRUN, str(ROOT / "benchmarks" / "bare_lm.py"), "--metrics-file", str(metrics)]
    command += ["--args", json.dumps(args), "--precision", precision]
    started = time.time()
    run(command, environment(device), ROOT)
    return read_points(metrics), started


def runtime(work: Path, args: dict, precision: str, device: str) -> tuple[list, float]:
    metrics = work / f"runtime-{time.monotonic_ns()}.jsonl"
    spec = one_gpu_lm_spec("gpu-overhead", args, {"type": "ddp"}, precision)
    env = environment(device) | {
        "TRAINPLANE_SPEC": json.dumps(spec),
        "TRAINPLANE_METRICS_FILE": str(metrics),
    }
    started = time.time()
    run([*TORCHRUN, "-m", "trainplane.runtime.local"], env, EXAMPLE)
    return read_points(metrics), started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--small", action="store_true", help="a tiny model, for a smoke run")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--skip", type=int, default=20, help="warm-up steps left out of steps/s")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="a JSON summary as the last line")
    options = parser.parse_args()
    args = {**(SMALL_ARGS if options.small else GPU_ARGS), "steps": options.steps}
    precision = "bf16" if options.device == "cuda" else "fp32"
    results: dict[str, list[tuple[float, float]]] = {"bare": [], "runtime": []}
    with tempfile.TemporaryDirectory(prefix="tp-gpu-overhead-") as folder:
        for _ in range(options.repeats):  # interleaved, so drift hits both
            for name, way in (("bare", bare), ("runtime", runtime)):
                points, started = way(Path(folder), args, precision, options.device)
                results[name].append(summarise(points, started, options.skip))

    figures = medians(results)
    where = "one GPU" if options.device == "cuda" else "one CPU worker"
    print(f"{options.steps} steps, {where}, {precision}, median of {options.repeats}:")
    labels = {"bare": "bare torchrun (plain PyTorch)", "runtime": "trainplane runtime, torchrun"}
    print_table(figures, labels, rate_digits=2)
    if options.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
