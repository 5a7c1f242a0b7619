"""The GPU suite: every path a GPU job takes, on one GPU, in one table.

    python benchmarks/gpu_suite.py                       # one NVIDIA GPU, < 8 min on an H200
    python benchmarks/gpu_suite.py --device cpu --small  # a smoke run anywhere (CI)

Rows: the LM example (examples/lm) under DDP, FSDP2 and DeepSpeed ZeRO-1/2/3
in bf16 (a world of one: NCCL on a GPU, gloo on CPU); the fine-tune recipe,
LoRA and full, on a tiny random-init Llama saved locally; a command job whose
script puts its tensors on ``cuda:$LOCAL_RANK``. Each training row exports its
model (``register_model``), and the suite loads the export back and runs it.

Each row is one attempt as a job's Ray job runs it, ``python -m
trainplane.runtime.driver`` with the job's validated spec, and a one-worker
attempt runs without Ray (the function in the driver's own process, the
command under torchrun's environment): the suite needs neither Ray nor a
control plane, so it also checks a GPU machine where Ray is not installed.

Columns: tokens/s (the runtime's own figure, after the warm-up steps); MFU
(benchmarks/mfu.py: embedding tables left out of 6N, the exact part's dense
bf16 peak, "unknown" for a part not known exactly); peak GB, the most the
row's process ever held (on a GPU the allocator's peak over the whole run,
model building and export included; on CPU the process's peak resident
memory, imports included); est GB, trainplane's per-GPU estimate of the same
run without its framework line (the CUDA context, which the allocator does
not count), as ``trainplane plan`` computes it; export s, from the last
reported step to the export's manifest (gathering, rebuilding and saving the
model); reload, what the model loaded back from its export computes.
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import os
import runpy
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import mfu
from gpu_check import STRATEGIES  # ddp, fsdp, zero1, zero2, zero3

ROOT = Path(__file__).resolve().parent.parent
LM = ROOT / "examples" / "lm"
sys.path.insert(0, str(ROOT / "src"))

# The LM: ~270M parameters, a few seconds of steps per strategy on an H200.
LM_ARGS = {"steps": 40, "global_batch": 16, "seq_len": 1024, "vocab": 32768, "d_model": 1024}
LM_ARGS |= {"layers": 16, "heads": 16, "sequences": 768, "lr": 3e-4}
LM_SMALL = {"steps": 8, "global_batch": 4, "seq_len": 32, "d_model": 64, "sequences": 32}
LLAMA = {"hidden_size": 512, "layers": 4, "steps": 30, "micro_batch": 16, "seq_len": 64}
LLAMA_SMALL = {"hidden_size": 64, "layers": 2, "steps": 6, "micro_batch": 4, "seq_len": 32}
# Loading an exported program is not thread-safe (torch.export keeps the
# deserializer in a global): rows running side by side reload one at a time.
RELOADING = threading.Lock()
DEEPSPEED_ON_CPU = (
    "skipped: DeepSpeed on CPU JIT-compiles its ops first (minutes); --deepspeed-on-cpu runs it"
)
COMMAND_SCRIPT = """\
import os, torch, torch.distributed as dist
local_rank = int(os.environ["LOCAL_RANK"])
on_gpu = os.environ.get("TRAINPLANE_DEVICE") == "cuda"
device = torch.device(f"cuda:{local_rank}") if on_gpu else torch.device("cpu")
if on_gpu:
    torch.cuda.set_device(device)
dist.init_process_group("nccl" if on_gpu else "gloo")
total = torch.ones(1, device=device) * (dist.get_rank() + 1)
dist.all_reduce(total)
print(f"command rank {dist.get_rank()} local_rank {local_rank} device {device} "
      f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')} sum {total.item():g}")
dist.destroy_process_group()
"""


@dataclass
class Row:
    name: str
    status: str = "ok"
    tokens_per_s: float | None = None
    mfu: str = "-"
    peak_gb: float | None = None
    estimate_gb: float | None = None
    export_s: float | None = None
    reload: str = "-"
    log: list[str] = field(default_factory=list)


@dataclass
class Setup:
    device: str
    small: bool
    work: Path
    skip: int
    peak: mfu.Peak | None
    accelerator: str
    deepspeed_on_cpu: bool = False


# --- one attempt --------------------------------------------------------------------------
def run_attempt(setup: Setup, name: str, spec_doc: dict, cwd: Path) -> tuple[dict, Path, str]:
    """Run ``spec_doc`` as an attempt of one worker; returns the validated spec,
    the attempt's folder and its output. Raises with the output's tail if it fails."""
    from trainplane.jobs.spec import parse_spec

    spec = parse_spec(spec_doc).model_dump(mode="json")
    folder = setup.work / name
    folder.mkdir()
    env = {
        **os.environ,
        "TRAINPLANE_SPEC": json.dumps(spec),
        "TRAINPLANE_ACCELERATOR": setup.accelerator,
        "TRAINPLANE_CHECKPOINT_URI": str(folder / "checkpoints"),
        "TRAINPLANE_MODEL_URI": str(folder / "model"),
        "TRAINPLANE_METRICS_FILE": str(folder / "metrics.jsonl"),
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])
        ),
        # A command's `python` is this Python, as the worker image's is its own.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    if setup.device == "cpu":
        env["DS_ACCELERATOR"] = "cpu"
    command = [sys.executable, str(Path(__file__).resolve()), "--attempt", str(folder / "peak")]
    run = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    output = run.stdout + run.stderr
    if run.returncode != 0:
        raise RuntimeError(f"exit {run.returncode}:\n{output[-3000:]}")
    return spec, folder, output


def attempt_entrypoint(peak_file: str) -> None:
    """In the row's process: the driver, as Ray's job would start it, and the
    process's peak memory written when it exits."""
    atexit.register(_write_peak, Path(peak_file))
    sys.argv = ["trainplane.runtime.driver"]
    runpy.run_module("trainplane.runtime.driver", run_name="__main__", alter_sys=True)


def _write_peak(path: Path) -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        peak = torch.cuda.max_memory_allocated()
    else:
        status = Path("/proc/self/status").read_text()
        peak = next(int(line.split()[1]) * 1024 for line in status.splitlines() if "VmHWM" in line)
    path.write_text(str(peak))


def steady_tokens_per_second(folder: Path, skip: int) -> float | None:
    points = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    rates = [p["metrics"]["tokens_per_s"] for p in points if "tokens_per_s" in p["metrics"]]
    steady = rates[skip:] or rates
    return statistics.median(steady) if steady else None


def export_seconds(folder: Path) -> float | None:
    """From the last reported step to the export's manifest, written last."""
    points = (folder / "metrics.jsonl").read_text().splitlines()
    manifest = folder / "model" / "manifest.json"
    if not points or not manifest.exists():
        return None
    return manifest.stat().st_mtime - json.loads(points[-1])["time"]


def fill(row: Row, setup: Setup, folder: Path, per_token: float | None) -> None:
    row.tokens_per_s = steady_tokens_per_second(folder, setup.skip)
    if setup.device == "cuda" and row.tokens_per_s and per_token:
        row.mfu = mfu.shown(mfu.mfu(row.tokens_per_s, per_token, setup.peak))
    row.peak_gb = int((folder / "peak").read_text()) / 1e9
    row.export_s = export_seconds(folder)


def estimate_gb(spec: dict, config: dict | None, on_gpu: bool) -> float | None:
    """trainplane's per-GPU estimate, as plan shows it, less the framework line."""
    from trainplane.jobs.memory import estimate
    from trainplane.jobs.spec import parse_spec
    from trainplane.services.estimates import requested_strategy, shape_of, workload_of

    parsed = parse_spec(spec)
    shape = shape_of(parsed, config)
    if shape is None:
        return None
    found = estimate(shape, workload_of(parsed), requested_strategy(parsed), 1, on_gpu=on_gpu)
    return (found.total - found.gpu.get("framework", 0.0)) / 1e9


# --- the LM under each strategy -----------------------------------------------------------
def lm_args(small: bool) -> dict:
    sys.path.insert(0, str(LM))
    from train import DEFAULTS

    return {**DEFAULTS, **(LM_SMALL if small else LM_ARGS)}


def lm_row(setup: Setup, name: str, precision: str) -> Row:
    row = Row(f"lm {name}")
    if name.startswith("zero") and setup.device == "cpu" and not setup.deepspeed_on_cpu:
        row.status = DEEPSPEED_ON_CPU
        return row
    import torch

    args = lm_args(setup.small)
    from train import TinyLM

    with torch.device("meta"):
        model = TinyLM(
            args["vocab"], args["d_model"], args["layers"], args["heads"], args["seq_len"]
        )
    counted = mfu.matmul_parameters(model)
    per_token = mfu.flops_per_token(
        counted, layers=args["layers"], d_model=args["d_model"], seq_len=args["seq_len"]
    )
    doc = {
        "kind": "train",
        "name": f"gpu-suite-lm-{name}",
        "entrypoint": {"function": "train:train_loop", "args": args},
        "resources": {"gpus": 1},
        "strategy": STRATEGIES[name],
        "precision": precision,
        "model": {
            "parameters": sum(p.numel() for p in model.parameters()),
            "layers": args["layers"],
            "hidden_size": args["d_model"],
            "heads": args["heads"],
            "vocab_size": args["vocab"],
            "sequence_length": args["seq_len"],
            "micro_batch_size": args["global_batch"],
        },
        "register_model": {"name": f"gpu-suite-lm-{name}"},
    }
    spec, folder, _ = run_attempt(setup, row.name.replace(" ", "-"), doc, LM)
    fill(row, setup, folder, per_token)
    row.estimate_gb = estimate_gb(spec, None, on_gpu=setup.device == "cuda")
    with RELOADING:
        row.reload = reload_lm(folder / "model" / "mlflow", args)
    return row


def reload_lm(mlflow_folder: Path, args: dict) -> str:
    import mlflow.pytorch
    import torch
    import torch.nn.functional as F
    from train import markov_corpus

    model = mlflow.pytorch.load_model(str(mlflow_folder))
    inputs, targets = markov_corpus(2, args["seq_len"], args["vocab"], args["seed"] + 1)[:]
    with torch.no_grad():
        logits = model(inputs)
    loss = F.cross_entropy(logits.float().reshape(-1, args["vocab"]), targets.reshape(-1)).item()
    if not math.isfinite(loss) or loss > math.log(args["vocab"]) + 1:
        raise RuntimeError(f"the reloaded LM's loss is {loss:.3f}")
    return f"loss {loss:.2f}"


# --- the fine-tune recipe -----------------------------------------------------------------
def tiny_llama(setup: Setup) -> Path:
    from trainplane.testing.tiny_models import arithmetic_rows, build_tiny_llama, write_jsonl

    shape = LLAMA_SMALL if setup.small else LLAMA
    folder = setup.work / "tiny-llama"
    build_tiny_llama(folder, hidden_size=shape["hidden_size"], layers=shape["layers"])
    write_jsonl(setup.work / "train.jsonl", arithmetic_rows(0, 400))
    write_jsonl(setup.work / "eval.jsonl", arithmetic_rows(400, 432))
    return folder


def llama_flops_per_token(base: Path, lora: dict | None, seq_len: int) -> float | None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(base)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    if lora:
        from peft import LoraConfig, get_peft_model

        adapter = LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], target_modules=lora["modules"])
        model = get_peft_model(model, adapter)
    counted = mfu.matmul_parameters(model)
    layers, width = config.num_hidden_layers, config.hidden_size
    return mfu.flops_per_token(counted, layers=layers, d_model=width, seq_len=seq_len)


def finetune_row(setup: Setup, method: str, base: Path, precision: str) -> Row:
    row = Row(f"finetune {method}")
    shape = LLAMA_SMALL if setup.small else LLAMA
    lora = {"r": 8, "alpha": 16, "modules": ["q_proj", "v_proj"]} if method == "lora" else None
    doc = {
        "kind": "finetune",
        "name": f"gpu-suite-finetune-{method}",
        "base_model": str(base),
        "dataset": {
            "train": str(setup.work / "train.jsonl"),
            "eval": str(setup.work / "eval.jsonl"),
        },
        "method": (
            {
                "type": "lora",
                "r": lora["r"],
                "alpha": lora["alpha"],
                "target_modules": lora["modules"],
            }
            if lora
            else {"type": "full"}
        ),
        "hyperparameters": {
            "learning_rate": 2e-3 if lora else 3e-4,
            "max_steps": shape["steps"],
            "micro_batch_size": shape["micro_batch"],
            "max_seq_len": shape["seq_len"],
            "eval_every_steps": shape["steps"],
        },
        "resources": {"gpus": 1},
        "strategy": {"type": "ddp"},
        "precision": precision,
        "register_model": {"name": f"gpu-suite-finetune-{method}"},
    }
    spec, folder, _ = run_attempt(setup, row.name.replace(" ", "-"), doc, setup.work)
    per_token = llama_flops_per_token(base, lora, shape["seq_len"])
    fill(row, setup, folder, per_token)
    config = json.loads((base / "config.json").read_text())
    row.estimate_gb = estimate_gb(spec, config, on_gpu=setup.device == "cuda")
    with RELOADING:
        row.reload = reload_transformers(folder / "model" / "mlflow")
    return row


def reload_transformers(mlflow_folder: Path) -> str:
    import mlflow.transformers
    import torch

    parts = mlflow.transformers.load_model(str(mlflow_folder), return_type="components")
    tokens = parts["tokenizer"]("what is 3 plus 3?", return_tensors="pt")
    with torch.no_grad():
        logits = parts["model"](**tokens).logits
    if not torch.isfinite(logits).all():
        raise RuntimeError("the reloaded model's logits are not finite")
    return f"logits {tuple(logits.shape)}"


# --- a command job ------------------------------------------------------------------------
def command_row(setup: Setup) -> Row:
    row = Row("command cuda:LOCAL_RANK" if setup.device == "cuda" else "command (cpu)")
    script = setup.work / "command.py"
    script.write_text(COMMAND_SCRIPT)
    doc = {
        "kind": "train",
        "name": "gpu-suite-command",
        "entrypoint": {"command": ["python", str(script)]},
        "resources": {"gpus": 1},
    }
    _, _, output = run_attempt(setup, "command", doc, setup.work)
    lines = [line for line in output.splitlines() if "command rank 0 local_rank 0" in line]
    if not lines:
        raise RuntimeError(f"the command printed no rank line:\n{output[-2000:]}")
    row.reload = lines[0].split("device ", 1)[1].split()[0]
    return row


# --- the table ----------------------------------------------------------------------------
def cell(value: float | None, spec: str) -> str:
    return format(value, spec) if value is not None else "-"


def print_table(rows: list[Row]) -> None:
    print(
        "| row | tokens/s | MFU | peak GB | est GB | export s | reload | status |\n"
        "|---|---:|---:|---:|---:|---:|---|---|"
    )
    for r in rows:
        print(
            f"| {r.name} | {cell(r.tokens_per_s, '.0f')} | {r.mfu} | {cell(r.peak_gb, '.3g')} "
            f"| {cell(r.estimate_gb, '.3g')} | {cell(r.export_s, '.1f')} | {r.reload} "
            f"| {r.status} |"
        )
    for r in rows:
        for line in r.log:
            print(f"\n{r.name}: {line}")


def describe_machine(device: str) -> tuple[str, mfu.Peak | None]:
    import torch

    if device == "cpu":
        print(f"CPU, {os.cpu_count()} cores, torch {torch.__version__}")
        return "cpu", None
    if not torch.cuda.is_available():
        sys.exit(
            "no CUDA device here (an NVIDIA driver older than the CUDA torch was built "
            f"with, {torch.version.cuda}, also shows as none); --device cpu --small for a smoke run"
        )
    name = torch.cuda.get_device_name(0)
    peak = mfu.peak_for(name)
    driver = "unknown"
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
    except Exception as exc:  # the driver version is only shown
        driver = f"unknown ({type(exc).__name__})"
    print(f"GPU: {name}, driver {driver}, torch {torch.__version__} (CUDA {torch.version.cuda})")
    print(f"peak: {f'{peak.part}, {peak.tflops:g} dense bf16 TFLOPS' if peak else 'unknown part'}")
    return name.removeprefix("NVIDIA ").split()[0], peak


def timed(name: str, job: Callable[[], Row]) -> Row:
    began = time.monotonic()
    try:
        row = job()
    except Exception as exc:
        row = Row(name, status="FAILED", log=[f"{type(exc).__name__}: {exc}"])
    print(f"{name}: {row.status} ({time.monotonic() - began:.0f} s)", flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--small", action="store_true", help="tiny models, for a smoke run")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--skip", type=int, default=5, help="warm-up reports left out of tokens/s")
    parser.add_argument("--deepspeed-on-cpu", action="store_true")
    parser.add_argument("--parallel", type=int, help="rows at once (default: 1 on a GPU, 2 on CPU)")
    parser.add_argument("--attempt", help=argparse.SUPPRESS)  # in a row's own process
    options = parser.parse_args()
    if options.attempt:
        attempt_entrypoint(options.attempt)
        return 0
    started = time.monotonic()
    accelerator, peak = describe_machine(options.device)
    precision = "bf16"
    # One GPU runs one row at a time (its memory is measured); CPUs may run two.
    parallel = options.parallel or (1 if options.device == "cuda" else 2)
    with tempfile.TemporaryDirectory(prefix="tp-gpu-suite-") as folder:
        setup = Setup(
            options.device,
            options.small,
            Path(folder),
            options.skip,
            peak,
            accelerator,
            options.deepspeed_on_cpu,
        )
        base = tiny_llama(setup)
        # Loaded once here, not by two rows' reloads at the same time.
        import mlflow.pytorch
        import mlflow.transformers  # noqa: F401

        jobs = {
            f"lm {n}": partial(lm_row, setup, n, precision) for n in options.strategies.split(",")
        }
        for method in ("lora", "full"):
            jobs[f"finetune {method}"] = partial(finetune_row, setup, method, base, precision)
        jobs["command"] = partial(command_row, setup)
        with ThreadPoolExecutor(parallel) as pool:
            futures = {name: pool.submit(timed, name, job) for name, job in jobs.items()}
            rows = [futures[name].result() for name in jobs]
    print()
    print_table(rows)
    print(f"\n{options.device}, {precision}; total {time.monotonic() - started:.0f} s")
    return 1 if any(r.status == "FAILED" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
