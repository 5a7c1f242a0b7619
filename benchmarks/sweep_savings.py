"""What early stopping saves a sweep: the same 16-trial random search run
twice in one run, without early stopping and with ASHA, compared on the
GPU-seconds its trials used and the best objective each found.

The search: examples/mlp's learning rate, log_uniform 1e-5..3e-1, 60 steps per
trial, 1 GPU per trial, seed 0, objective the last reported ``loss`` (min).
With ASHA: min_steps 10, reduction_factor 3 (rungs at steps 10 and 30).

It drives trainplane's own search engine (``trainplane.jobs.sweep_search``:
Optuna's RandomSampler and SuccessiveHalvingPruner through the same
``propose`` and ``judge`` calls the service makes, the study rebuilt from the
trial records at every call) in this process, one trial at a time as a sweep
with ``parallel: 1`` runs them, and each trial really trains examples/mlp's
model on its data (its ``MLP`` and ``make_dataset``, AdamW, the cosine
schedule, batch 64), on this machine's CPU. A trial judged at a decision step
stops there, as a pruned trial does. GPU-seconds are the trials' training
seconds times their GPUs, as CPU time of the one-threaded training (steadier
than wall time on a shared machine); the seconds a service spends starting
each trial (the same per trial in both searches, so they narrow the saving)
are not counted, and the trial steps are printed beside them.

Targets (issue 27): ASHA's best objective within 5% of the full search's,
with at most 50% of its GPU-seconds.

    .venv/bin/python benchmarks/sweep_savings.py [--trials 16] [--steps 60] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from trainplane.jobs.spec import parse_spec
from trainplane.jobs.sweep_search import TrialRecord, best, decision_steps, judge, propose

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "mlp"
LR = "entrypoint.args.lr"
GPUS = 1
BEST_GAP_TARGET = 5.0  # %: ASHA's best objective within this of the full search's
GPU_SECONDS_TARGET = 0.5  # ASHA's GPU-seconds at most this fraction of the full search's


def sweep_document(
    trials: int, steps: int, early_stop: dict[str, Any], seed: int = 0
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
        "search": {"algorithm": "random", "trials": trials, "parallel": 1, "seed": seed},
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
    step, loss_value, reason = 0, float("nan"), ""
    started = time.process_time()
    while step < steps and not reason:
        for inputs, labels in loader:
            loss = loss_fn(model(inputs), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            step += 1
            loss_value = float(loss.detach())
            if step in judge_at:
                verdict = judge_at[step](loss_value)
                if verdict.prune:
                    reason = verdict.reason
            if step >= steps or reason:
                break
    return step, time.process_time() - started, loss_value, reason


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--min-steps", type=int, default=10)
    parser.add_argument("--reduction-factor", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="the search's seed")
    parser.add_argument("--json", action="store_true", help="end with one line of JSON")
    options = parser.parse_args()

    import torch

    torch.set_num_threads(1)  # one trial's worth of compute, steady timings
    example = load_example()
    # Untimed: the first steps of the first trial pay PyTorch's warm-up,
    # which would otherwise count against whichever search runs first.
    train_trial(example, 1e-3, options.steps, {})
    asha = {
        "algorithm": "asha",
        "min_steps": options.min_steps,
        "reduction_factor": options.reduction_factor,
    }
    modes = {"full": {"algorithm": "none"}, "asha": asha}
    results: dict[str, dict[str, Any]] = {}
    for mode, early_stop in modes.items():
        document = sweep_document(options.trials, options.steps, early_stop, options.seed)
        runs = run_sweep(example, document)
        results[mode] = summary(runs)
        for run in runs:
            status = run.pruned or f"ran to the end, loss {run.value:.4g}"
            print(f"  {mode} {run.number:>2} lr {run.lr:.2e} {run.steps:>3} steps: {status}")

    full, fast = results["full"], results["asha"]
    ratio = fast["gpu_seconds"] / full["gpu_seconds"]
    gap = 100.0 * (fast["best"] - full["best"]) / abs(full["best"])
    print(f"\n{options.trials} trials x {options.steps} steps, lr search, seed {options.seed}")
    header = ("trials", 7), ("pruned", 7), ("GPU-s", 9), ("steps", 7), ("best loss", 11)
    print(f"{'':6}" + "".join(f"{name:>{width}}" for name, width in header) + f"{'best lr':>10}")
    for mode, row in results.items():
        print(
            f"{mode:6}{row['trials']:>7}{row['pruned']:>7}{row['gpu_seconds']:>9.2f}"
            f"{row['steps']:>7}{row['best']:>11.4f}{row['best_lr']:>10.2e}"
        )
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
