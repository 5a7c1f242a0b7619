"""What early stopping saves a sweep: the same 16-trial random search run
twice in one run, without early stopping and with ASHA, compared on the
GPU-seconds its trials used and the best objective each found.

The search: examples/mlp's learning rate, log_uniform 1e-5..3e-1, 60 steps per
trial, 1 GPU per trial, seed 0, objective the last reported ``loss`` (min).
With ASHA: min_steps 10, reduction_factor 3 (rungs at steps 10 and 30).

Two ways to run it:

- by default, in this process: trainplane's own search engine
  (``trainplane.jobs.sweep_search``: Optuna's RandomSampler and
  SuccessiveHalvingPruner through the same ``propose`` and ``judge`` calls the
  service makes, the study rebuilt from the trial records at every call), one
  trial at a time as a sweep with ``parallel: 1`` runs them, each trial really
  training examples/mlp's model on its data (its ``MLP`` and ``make_dataset``,
  AdamW, the cosine schedule, batch 64) on this machine's CPU and stopping at
  the decision step where it is pruned. GPU-seconds are the trials' training
  seconds times their GPUs, as CPU time of the one-threaded training (steadier
  than wall time on a shared machine). About half a minute.
- ``--service``: both sweeps submitted as ``kind: sweep`` to a real
  ``trainplane up`` (its own home, port and local Ray, ``--parallel`` CPU
  slots), trials as jobs, pruning through the progress channel. GPU-seconds
  are the trials' ``gpu_hours`` (their attempts' running time, start-up and
  stop included); beside them the training seconds (first to last reported
  step). On examples/mlp a trial trains for 1-2 s inside some 15 s of worker
  start and stop, so there the GPU-seconds measure the per-trial overhead more
  than the search. About 5 to 6 minutes on 2 cores.

Targets (issue 27): ASHA's best objective within 5% of the full search's,
with at most 50% of its GPU-seconds.

    .venv/bin/python benchmarks/sweep_savings.py [--service] [--trials 16] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

from trainplane.jobs.spec import parse_spec
from trainplane.jobs.sweep_search import TrialRecord, best, decision_steps, judge, propose
from trainplane.testing.server import ServiceProcess

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "mlp"
LR = "entrypoint.args.lr"
GPUS = 1
BEST_GAP_TARGET = 5.0  # %: ASHA's best objective within this of the full search's
GPU_SECONDS_TARGET = 0.5  # ASHA's GPU-seconds at most this fraction of the full search's


def sweep_document(
    trials: int, steps: int, early_stop: dict[str, Any], seed: int = 0, parallel: int = 1
) -> dict[str, Any]:
    return {
        "kind": "sweep",
        "name": "sweep-savings",
        "trial": {
            "kind": "train",
            "entrypoint": {
                "function": "train:train_loop",
                "args": {"steps": steps},
                "working_dir": str(EXAMPLE),
            },
            "resources": {"gpus": GPUS},
        },
        "parameters": {LR: {"distribution": "log_uniform", "low": 1e-5, "high": 3e-1}},
        "objective": {"metric": "loss", "mode": "min"},
        "search": {"algorithm": "random", "trials": trials, "parallel": parallel, "seed": seed},
        "early_stop": early_stop,
    }


def load_example() -> ModuleType:
    """examples/mlp/train.py, for its model and dataset."""
    spec = importlib.util.spec_from_file_location("mlp_example", EXAMPLE / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class TrialRun:
    number: int
    lr: float
    steps: int
    seconds: float
    value: float
    pruned: str  # the reason, "" when it ran to the end


def train_trial(
    example: ModuleType, lr: float, steps: int, judge_at: dict[int, Any]
) -> tuple[int, float, float, str]:
    """examples/mlp's training loop with one process: (steps run, seconds,
    last loss, pruning reason). ``judge_at[step](loss)`` answers a Verdict."""
    import torch

    torch.manual_seed(0)
    dataset = example.make_dataset(4096, 32, 8, 0)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    model = example.MLP(32, 128, 8, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    loss_fn = torch.nn.CrossEntropyLoss()
    step, loss_value, reason, seconds = 0, float("nan"), "", 0.0
    while step < steps and not reason:
        batches = iter(loader)
        while step < steps and not reason:
            started = time.process_time()  # the trial's compute; judging is the server's
            batch = next(batches, None)
            if batch is None:
                break  # an epoch done: the next one reshuffles
            loss = loss_fn(model(batch[0]), batch[1])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            step += 1
            loss_value = float(loss.detach())
            seconds += time.process_time() - started
            if step in judge_at:
                verdict = judge_at[step](loss_value)
                if verdict.prune:
                    reason = verdict.reason
    return step, seconds, loss_value, reason


def run_sweep(example: ModuleType, document: dict[str, Any]) -> list[TrialRun]:
    """One sweep, trial after trial, as the service's controller and pruning
    path drive the engine: propose from the records, judge at each decision
    step with the trial's own record among them, keep what judge returns."""
    spec = parse_spec(document)
    steps = document["trial"]["entrypoint"]["args"]["steps"]
    records: list[TrialRecord] = []
    runs: list[TrialRun] = []
    for number in range(1, spec.search.trials + 1):
        parameters = propose(spec, records, number)
        assert parameters is not None
        record = TrialRecord(number, parameters, "running", None, {}, {})
        records.append(record)

        def judge_step(step: int, loss: float, number: int = number) -> Any:
            own = records[number - 1]
            verdict = judge(spec, records, number, step, loss)
            records[number - 1] = TrialRecord(
                number,
                own.parameters,
                "running",
                None,
                {**own.intermediate, step: loss},
                verdict.search_state,
            )
            return verdict

        judge_at = {
            d: (lambda loss, d=d: judge_step(d, loss)) for d in decision_steps(spec) if d < steps
        }
        ran, seconds, value, reason = train_trial(example, parameters[LR], steps, judge_at)
        own = records[number - 1]
        records[number - 1] = TrialRecord(
            number,
            own.parameters,
            "pruned" if reason else "succeeded",
            None if reason else value,
            own.intermediate,
            own.search_state,
        )
        runs.append(TrialRun(number, parameters[LR], ran, seconds, value, reason))
    winner = best(spec, records)
    assert winner is not None
    return runs


def summary(runs: list[TrialRun]) -> dict[str, Any]:
    finished = [r for r in runs if not r.pruned]
    return {
        "trials": len(runs),
        "pruned": len(runs) - len(finished),
        "gpu_seconds": round(sum(r.seconds for r in runs) * GPUS, 3),
        "steps": sum(r.steps for r in runs),
        "best": round(min(r.value for r in finished), 5),
        "best_lr": min(finished, key=lambda r: r.value).lr,
    }


class Up(ServiceProcess):
    """``trainplane up`` with CPU worker slots, as a user on one machine runs it."""

    name = "trainplane up"
    ready_path = "/readyz"

    def __init__(self, env: dict[str, str], *, slots: int, log_path: Path) -> None:
        super().__init__(env, log_path=log_path)
        self.slots = slots

    def command(self) -> list[str]:
        where = ("--host", "127.0.0.1", "--port", str(self.port), "--slots", str(self.slots))
        return [str(Path(sys.executable).with_name("trainplane")), "up", *where, "--cpu"]


def service_sweep(http: httpx.Client, document: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Submit a sweep, wait for it to end, and sum up its trials as the API
    lists them (GPU-seconds from their attempts' GPU-hours)."""
    answer = http.post("/v1/jobs", json=document)
    if answer.status_code != 201:
        raise RuntimeError(f"sweep refused ({answer.status_code}): {answer.text[:500]}")
    sweep_id = answer.json()["id"]
    started = time.monotonic()
    while not (job := http.get(f"/v1/jobs/{sweep_id}").json())["terminal"]:
        if time.monotonic() - started > timeout:
            http.post(f"/v1/jobs/{sweep_id}/cancel")
            raise RuntimeError(f"the sweep did not end within {timeout:.0f} s")
        time.sleep(1)
    if job["status"] != "SUCCEEDED":
        raise RuntimeError(f"the sweep ended {job['status']}: {job.get('reason')}")
    answer = http.get(f"/v1/jobs/{sweep_id}/trials")
    if answer.status_code != 200:
        raise RuntimeError(f"trials not listed ({answer.status_code}): {answer.text[:500]}")
    listing = answer.json()
    for trial in listing["items"]:
        print(
            f"  {document['early_stop']['algorithm']:4} {trial['number']:>2} "
            f"lr {trial['parameters'][LR]:.2e} {trial['step'] or 0:>3} steps "
            f"{trial['gpu_hours'] * 3600:6.1f} GPU-s: {trial['status']} {trial['reason'] or ''}"
        )
    best_trial = listing["best_trial"]
    training = sum(training_seconds(http, t["id"]) for t in listing["items"])
    return {
        "trials": len(listing["items"]),
        "pruned": sum(1 for t in listing["items"] if (t["reason"] or "").startswith("pruned")),
        "gpu_seconds": round(sum(t["gpu_hours"] for t in listing["items"]) * 3600, 1),
        "steps": sum(t["step"] or 0 for t in listing["items"]),
        "training_seconds": round(training * GPUS, 1),
        "best": round(best_trial["objective"]["value"], 5),
        "best_lr": best_trial["parameters"][LR],
        "wall_seconds": round(time.monotonic() - started, 1),
    }


def training_seconds(http: httpx.Client, job_id: str) -> float:
    """From a trial's first reported step to its last."""
    points = http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 1000}).json()["points"]
    times = [p["time"] for p in points]
    return max(times) - min(times) if times else 0.0


def run_service(modes: dict[str, dict[str, Any]], options: argparse.Namespace) -> dict[str, Any]:
    """Both sweeps on a real ``trainplane up`` (its own home, port and Ray),
    one after the other."""
    work = Path(tempfile.mkdtemp(prefix="tp-sweep-savings-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINPLANE_")}
    env.update(TRAINPLANE_HOME=str(work / "home"), TRAINPLANE_TRACKING_ENABLED="false")
    results: dict[str, Any] = {}
    try:
        up = Up(env, slots=options.parallel * GPUS, log_path=work / "up.log")
        with up.start(timeout=240):
            token = (work / "home" / "token").read_text().strip()
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=up.url, headers=headers, timeout=30) as http:
                for mode, early_stop in modes.items():
                    document = sweep_document(
                        options.trials, options.steps, early_stop, options.seed, options.parallel
                    )
                    results[mode] = service_sweep(http, document, timeout=options.timeout)
    except Exception:
        print((work / "up.log").read_text()[-3000:], file=sys.stderr)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def run_engine(modes: dict[str, dict[str, Any]], options: argparse.Namespace) -> dict[str, Any]:
    """Both sweeps in this process: the engine, and examples/mlp's training."""
    import torch

    torch.set_num_threads(1)  # one trial's worth of compute, steady timings
    example = load_example()
    # Untimed: the first steps of the first trial pay PyTorch's warm-up,
    # which would otherwise count against whichever search runs first.
    train_trial(example, 1e-3, options.steps, {})
    results: dict[str, Any] = {}
    for mode, early_stop in modes.items():
        document = sweep_document(options.trials, options.steps, early_stop, options.seed)
        runs = run_sweep(example, document)
        results[mode] = summary(runs)
        for run in runs:
            status = run.pruned or f"ran to the end, loss {run.value:.4g}"
            print(f"  {mode} {run.number:>2} lr {run.lr:.2e} {run.steps:>3} steps: {status}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--min-steps", type=int, default=10)
    parser.add_argument("--reduction-factor", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="the search's seed")
    parser.add_argument("--parallel", type=int, default=2, help="trials at once (service)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per sweep (service)")
    parser.add_argument("--service", action="store_true", help="on a real trainplane up")
    parser.add_argument("--json", action="store_true", help="end with one line of JSON")
    options = parser.parse_args()

    asha = {
        "algorithm": "asha",
        "min_steps": options.min_steps,
        "reduction_factor": options.reduction_factor,
    }
    modes = {"full": {"algorithm": "none"}, "asha": asha}
    run = run_service if options.service else run_engine
    results = run(modes, options)

    full, fast = results["full"], results["asha"]
    ratio = fast["gpu_seconds"] / full["gpu_seconds"]
    gap = 100.0 * (fast["best"] - full["best"]) / abs(full["best"])
    where = f"trainplane up, {options.parallel} at once" if options.service else "in-process"
    print(f"\n{options.trials} trials x {options.steps} steps, seed {options.seed}, {where}")
    columns = [  # (title, key, format)
        ("trials", "trials", ">7"),
        ("pruned", "pruned", ">7"),
        ("GPU-s", "gpu_seconds", ">9.2f"),
        ("train-s", "training_seconds", ">9.1f"),
        ("steps", "steps", ">7"),
        ("best loss", "best", ">11.4f"),
        ("best lr", "best_lr", ">10.2e"),
    ]
    columns = [c for c in columns if c[1] in full]
    print(f"{'':6}" + "".join(f"{title:>{fmt[1:].split('.')[0]}}" for title, _, fmt in columns))
    for mode, row in results.items():
        print(f"{mode:6}" + "".join(f"{row[key]:{fmt}}" for _, key, fmt in columns))
    steps_ratio = fast["steps"] / full["steps"]
    print(f"ASHA / full: GPU-seconds {ratio:.2f}, steps {steps_ratio:.2f}")
    gap_met = gap <= BEST_GAP_TARGET
    cost_met = ratio <= GPU_SECONDS_TARGET
    print(f"target: best within {BEST_GAP_TARGET:.0f}% (gap {gap:+.1f}%): {_met(gap_met)}")
    print(f"target: GPU-seconds <= {GPU_SECONDS_TARGET:.0%} (got {ratio:.0%}): {_met(cost_met)}")
    if options.json:
        print(
            json.dumps(
                {
                    **{mode: row for mode, row in results.items()},
                    "gpu_seconds_ratio": round(ratio, 4),
                    "steps_ratio": round(steps_ratio, 4),
                    "best_gap_percent": round(gap, 3),
                    "targets_met": {"best_within_5_percent": gap_met, "gpu_seconds_half": cost_met},
                }
            )
        )
    sys.exit(0)


def _met(met: bool) -> str:
    return "met" if met else "NOT met"


if __name__ == "__main__":
    main()
