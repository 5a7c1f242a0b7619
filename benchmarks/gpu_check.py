"""The GPU check: the LM example under every strategy on one NVIDIA GPU (NCCL,
bf16) through trainplane's runtime, against a bare PyTorch loop of the same
model, printing tokens/s and MFU. Needs no Ray: each run is
``python -m trainplane.runtime.local`` (a world of one) in its own process.

    python benchmarks/gpu_check.py                      # on a GPU machine, < 5 min on an H200
    python benchmarks/gpu_check.py --device cpu --small # a smoke run anywhere

MFU as benchmarks/mfu.py counts it: 6 x the parameters of matrix multiplies
(embedding tables left out) + 12 x layers x d_model x seq_len FLOPs per token,
against the exact part's peak dense bf16 FLOPs (unknown parts: "unknown").
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

import mfu

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "lm"

# A ~270M-parameter model: big enough to keep an H200 busy, small enough that
# every strategy's run takes seconds.
GPU_ARGS = {
    "steps": 60,
    "global_batch": 16,
    "seq_len": 1024,
    "vocab": 32768,
    "d_model": 1024,
    "layers": 16,
    "heads": 16,
    "sequences": 1024,
    "lr": 3e-4,
}
SMALL_ARGS = {"steps": 12, "global_batch": 4, "seq_len": 32, "d_model": 64, "sequences": 64}
STRATEGIES = {
    "ddp": {"type": "ddp"},
    "fsdp": {"type": "fsdp"},
    "zero1": {"type": "deepspeed", "deepspeed": {"stage": 1}},
    "zero2": {"type": "deepspeed", "deepspeed": {"stage": 2}},
    "zero3": {"type": "deepspeed", "deepspeed": {"stage": 3}},
}


def lm_on_meta(args: dict):
    """The LM example's model with these arguments, on the meta device (no memory)."""
    sys.path.insert(0, str(EXAMPLE))
    import torch
    from train import TinyLM

    with torch.device("meta"):
        return TinyLM(
            args["vocab"], args["d_model"], args["layers"], args["heads"], args["seq_len"]
        )


def flops_per_token(args: dict) -> float:
    return mfu.flops_per_token(
        mfu.matmul_parameters(lm_on_meta(args)),
        layers=args["layers"],
        d_model=args["d_model"],
        seq_len=args["seq_len"],
    )


def tokens_per_second(metrics: Path, args: dict, skip: int) -> float:
    points = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    steady = [(p["step"], p["time"]) for p in points if p["step"] > skip]
    steps = steady[-1][0] - steady[0][0]
    return steps * args["global_batch"] * args["seq_len"] / (steady[-1][1] - steady[0][1])


def one_gpu_lm_spec(name: str, args: dict, strategy: dict, precision: str) -> dict:
    """The job spec of the LM example's train function on one GPU."""
    return {
        "kind": "train",
        "name": name,
        "entrypoint": {"function": "train:train_loop", "args": args},
        "resources": {"gpus": 1},
        "strategy": strategy,
        "precision": precision,
    }


def run_trainplane(strategy: dict, args: dict, precision: str, work: Path, device: str) -> Path:
    metrics = work / f"tp-{time.monotonic_ns()}.jsonl"
    spec = one_gpu_lm_spec("gpu-check", args, strategy, precision)
    env = {
        **os.environ,
        "TRAINPLANE_SPEC": json.dumps(spec),
        "TRAINPLANE_METRICS_FILE": str(metrics),
        "TRAINPLANE_DEVICE": device,
        "PYTHONPATH": str(EXAMPLE),
    }
    run = subprocess.run(
        [sys.executable, "-m", "trainplane.runtime.local"],
        env=env,
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        raise RuntimeError(f"{strategy} failed:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}")
    return metrics


def run_bare(args: dict, precision: str, work: Path) -> Path:
    metrics = work / f"bare-{time.monotonic_ns()}.jsonl"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bare_lm.py"),
            "--metrics-file",
            str(metrics),
            "--args",
            json.dumps(args),
            "--precision",
            precision,
        ],
        check=True,
        capture_output=True,
    )
    return metrics


def peak_tflops(device: str, given: float | None) -> mfu.Peak | None:
    if given:
        return mfu.Peak("given", given)
    if device != "cuda":
        return None
    import torch

    return mfu.peak_for(torch.cuda.get_device_name())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--small", action="store_true", help="a tiny model, for a smoke run")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--peak-tflops", type=float, help="the GPU's peak dense bf16 TFLOPS")
    parser.add_argument("--skip", type=int, default=5, help="warm-up steps left out")
    options = parser.parse_args()
    args = SMALL_ARGS if options.small else GPU_ARGS
    precision = "bf16" if options.device == "cuda" else "fp32"
    if options.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            sys.exit("no CUDA device here; use --device cpu --small for a smoke run")
        print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    peak = peak_tflops(options.device, options.peak_tflops)
    if options.device == "cuda":
        print(f"peak: {f'{peak.part}, {peak.tflops:g} TFLOPS bf16' if peak else 'unknown part'}")
    full_args = {**_defaults(), **args}
    per_token = flops_per_token(full_args)
    model = lm_on_meta(full_args)
    print(
        f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters "
        f"({mfu.matmul_parameters(model).total / 1e6:.1f}M outside embedding tables), "
        f"seq {full_args['seq_len']}, "
        f"global batch {full_args['global_batch']}, {precision}, {full_args['steps']} steps"
    )
    started = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tp-gpu-check-") as folder:
        work = Path(folder)
        base = tokens_per_second(run_bare(args, precision, work), full_args, options.skip)
        rows.append(("bare PyTorch loop", base))
        for name in options.strategies.split(","):
            metrics = run_trainplane(STRATEGIES[name], args, precision, work, options.device)
            rows.append((f"trainplane {name}", tokens_per_second(metrics, full_args, options.skip)))
    print(f"{'':24}{'tokens/s':>12}{'vs bare':>9}{'MFU':>8}")
    for label, rate in rows:
        used = mfu.shown(mfu.mfu(rate, per_token, peak)) if options.device == "cuda" else "-"
        print(f"{label:24}{rate:>12.0f}{rate / base:>9.3f}{used:>8}")
    print(f"total {time.monotonic() - started:.0f}s")


def _defaults() -> dict:
    sys.path.insert(0, str(EXAMPLE))
    from train import DEFAULTS

    return dict(DEFAULTS)


if __name__ == "__main__":
    main()
