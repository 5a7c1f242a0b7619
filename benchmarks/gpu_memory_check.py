"""The memory estimate against one NVIDIA GPU: the LM example under DDP,
FSDP2 and ZeRO-3 (a world of one: all one GPU allows), bf16, through
trainplane's runtime. Each run's peak of allocated GPU memory
(``torch.cuda.max_memory_allocated``, measured by
``trainplane.testing.memory_probe`` after the model is prepared) is printed
beside the estimate of the same parts (the estimate without its framework
line: the CUDA context and fragmentation are outside the allocator's count),
with their ratio. Needs no Ray; under 5 minutes on an H200.

    python benchmarks/gpu_memory_check.py                       # on a GPU machine
    python benchmarks/gpu_memory_check.py --device cpu --small  # a smoke run anywhere
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from trainplane.jobs.memory import (  # noqa: E402
    ModelShape,
    StrategyChoice,
    Workload,
    estimate,
)
from trainplane.testing.memory_probe import MEASURING_ENV, probe_spec  # noqa: E402

# A ~0.9B-parameter model: model states of ~14 GB, activations of a few GB.
GPU_ARGS = {
    "steps": 6,
    "global_batch": 8,
    "seq_len": 2048,
    "vocab": 32768,
    "d_model": 2048,
    "layers": 16,
    "heads": 16,
    "sequences": 64,
    "lr": 3e-4,
}
SMALL_ARGS = {"steps": 3, "global_batch": 4, "seq_len": 32, "d_model": 64, "sequences": 16}
STRATEGIES = {
    "ddp": ({"type": "ddp"}, StrategyChoice("ddp")),
    "fsdp": ({"type": "fsdp"}, StrategyChoice("fsdp")),
    "zero3": ({"type": "deepspeed", "deepspeed": {"stage": 3}}, StrategyChoice("deepspeed", 3)),
}


def lm_args(args: dict) -> dict:
    defaults = json.loads(
        subprocess.run(
            [sys.executable, "-c", "import json, train; print(json.dumps(train.DEFAULTS))"],
            cwd=ROOT / "examples" / "lm",
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    return {**defaults, **args}


def parameters(args: dict) -> int:
    d, layers, vocab, seq = args["d_model"], args["layers"], args["vocab"], args["seq_len"]
    return layers * (12 * d * d + 13 * d) + 2 * vocab * d + seq * d + 2 * d


def measure(strategy: dict, args: dict, precision: str, device: str, out: Path) -> int:
    spec = probe_spec("lm", args, out, strategy=strategy, gpus=1, precision=precision)
    env = {
        **os.environ,
        **MEASURING_ENV,
        "TRAINPLANE_SPEC": json.dumps(spec),
        "TRAINPLANE_DEVICE": device,
    }
    run = subprocess.run(
        [sys.executable, "-m", "trainplane.runtime.local"], env=env, capture_output=True, text=True
    )
    if run.returncode != 0:
        raise RuntimeError(f"{strategy} failed:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}")
    return json.loads((out / "rank-0.json").read_text())["peak_bytes"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--small", action="store_true", help="a tiny model, for a smoke run")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    options = parser.parse_args()
    args = lm_args(SMALL_ARGS if options.small else GPU_ARGS)
    on_gpu = options.device == "cuda"
    precision = "bf16" if on_gpu else "fp32"
    shape = ModelShape(
        parameters(args),
        layers=args["layers"],
        hidden_size=args["d_model"],
        heads=args["heads"],
        vocab_size=args["vocab"],
    )
    workload = Workload(
        precision, micro_batch_size=args["global_batch"], sequence_length=args["seq_len"]
    )
    size = f"{shape.parameters / 1e6:.1f}M parameters"
    print(f"LM example: {size}, {precision}, 1 {options.device} worker")
    print(f"{'strategy':<10}{'measured GB':>14}{'estimated GB':>15}{'ratio':>8}{'seconds':>9}")
    with tempfile.TemporaryDirectory() as work:
        for name in options.strategies.split(","):
            strategy, choice = STRATEGIES[name]
            started = time.monotonic()
            measured = measure(strategy, args, precision, options.device, Path(work) / name)
            found = estimate(shape, workload, choice, 1, on_gpu=on_gpu)
            # What the allocator counts: everything but the framework line.
            expected = found.total - found.gpu.get("framework", 0.0)
            print(
                f"{name:<10}{measured / 1e9:>14.3f}{expected / 1e9:>15.3f}"
                f"{expected / measured:>8.2f}{time.monotonic() - started:>9.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
