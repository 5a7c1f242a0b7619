"""What early stopping saves a sweep: the same 16-trial random search run
twice, without early stopping and with ASHA, compared on the GPU-seconds its
trials used and the best objective each found, for several search seeds.

The trial (``benchmarks/sweep_workload.py``): a trainplane train function, a
small feed-forward classifier on a synthetic task with noisy labels, 200 steps
of AdamW with a short warmup and a cosine decay over the whole run, judged by
its held-out loss (``val_loss``, reported every 10 steps and at the end; the
label noise keeps it well above 0). The search: the learning rate,
log_uniform 1e-5..3e-1, 1 GPU per trial. With ASHA: min_steps 10 (5% of the
run), reduction_factor 3, so rungs at steps 10, 30 and 90.

Two ways to run it:

- by default, in this process (``benchmarks/sweep_in_process.py``):
  trainplane's own search engine (``trainplane.jobs.sweep_search``: Optuna's
  RandomSampler and SuccessiveHalvingPruner through the ``propose`` and
  ``judge`` calls the service makes, the study rebuilt from the trial records
  at every call), one trial at a time as a sweep with ``parallel: 1`` runs
  them, a trial of one search then a trial of the other. Each trial is the
  sweep's own trial spec run by a real ``TrainContext`` and stopped, when
  pruned, by the "stop" answer the service gives. GPU-seconds are each
  trial's CPU time on one thread, less the time spent judging it, times its
  GPUs: the same count for both searches. About 12 s of CPU per seed.
- ``--service``: both sweeps submitted as ``kind: sweep`` to a real
  ``trainplane up`` (its own home, port and local Ray, ``--parallel`` CPU
  slots), trials as jobs, pruning through the progress channel. GPU-seconds
  are the trials' ``gpu_hours`` (their attempts' running time, start-up and
  stop included); beside them the training seconds (first to last reported
  step). A trial here trains for a few seconds inside several seconds of
  worker start and stop, which ASHA cannot save, so the GPU-seconds ratio is
  worse than in-process. Several minutes per seed on 2 cores.

Targets (issue 27): ASHA's best objective within 5% of the full search's,
with at most 50% of its GPU-seconds.

    .venv/bin/python benchmarks/sweep_savings.py [--seeds 0,1,2,3,4] [--service] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from sweep_in_process import TrialRun, sweep_trials, train_trial, world_of_one

from trainplane.jobs.spec import load_sweep_spec
from trainplane.testing.server import ServiceProcess

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "benchmarks"  # the trials' working_dir: sweep_workload.py
LR = "entrypoint.args.lr"
OBJECTIVE = "val_loss"
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
                "function": "sweep_workload:train_loop",
                "args": {"steps": steps},
                "working_dir": str(WORKLOAD),
            },
            "resources": {"gpus": GPUS},
        },
        "parameters": {LR: {"distribution": "log_uniform", "low": 1e-5, "high": 3e-1}},
        "objective": {"metric": OBJECTIVE, "mode": "min"},
        "search": {"algorithm": "random", "trials": trials, "parallel": parallel, "seed": seed},
        "early_stop": early_stop,
    }


def summary(runs: list[TrialRun]) -> dict[str, Any]:
    finished = [r for r in runs if not r.pruned]
    winner = min(finished, key=lambda r: r.value)
    return {
        "trials": len(runs),
        "pruned": len(runs) - len(finished),
        "gpu_seconds": round(sum(r.gpu_seconds for r in runs), 3),
        "steps": sum(r.steps for r in runs),
        "best": round(winner.value, 5),
        "best_lr": winner.parameters[LR],
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


def run_service(
    modes: dict[str, dict[str, Any]], options: argparse.Namespace, seeds: list[int]
) -> dict[int, dict[str, Any]]:
    """Both sweeps of every seed on one real ``trainplane up`` (its own home,
    port and Ray), one after the other."""
    work = Path(tempfile.mkdtemp(prefix="tp-sweep-savings-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINPLANE_")}
    env.update(TRAINPLANE_HOME=str(work / "home"), TRAINPLANE_TRACKING_ENABLED="false")
    results: dict[int, dict[str, Any]] = {}
    try:
        up = Up(env, slots=options.parallel * GPUS, log_path=work / "up.log")
        with up.start(timeout=240):
            token = (work / "home" / "token").read_text().strip()
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=up.url, headers=headers, timeout=30) as http:
                for seed in seeds:
                    results[seed] = {}
                    for mode, early_stop in modes.items():
                        document = sweep_document(
                            options.trials, options.steps, early_stop, seed, options.parallel
                        )
                        results[seed][mode] = service_sweep(http, document, options.timeout)
    except Exception:
        print((work / "up.log").read_text()[-3000:], file=sys.stderr)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def run_engine(
    modes: dict[str, dict[str, Any]], options: argparse.Namespace, seeds: list[int]
) -> dict[int, dict[str, Any]]:
    """Both sweeps of every seed in this process, a trial of one then a trial
    of the other, so that a change in the machine's load weighs on both."""
    results: dict[int, dict[str, Any]] = {}
    with world_of_one():
        # Untimed: the first steps of the first trial pay PyTorch's warm-up,
        # which would otherwise count against whichever search runs first.
        warm = load_sweep_spec(sweep_document(1, 20, {"algorithm": "none"}))
        train_trial(warm, {LR: 1e-3}, 1, None)
        for seed in seeds:
            searches = {
                mode: sweep_trials(sweep_document(options.trials, options.steps, stop, seed))
                for mode, stop in modes.items()
            }
            runs: dict[str, list[TrialRun]] = {mode: [] for mode in modes}
            for ended in itertools.zip_longest(*searches.values()):
                for mode, run in zip(searches, ended, strict=True):
                    if run is not None:
                        runs[mode].append(run)
            results[seed] = {mode: summary(mode_runs) for mode, mode_runs in runs.items()}
            for mode, mode_runs in runs.items():
                for run in mode_runs if options.verbose else ():
                    status = run.pruned or f"ran to the end, {OBJECTIVE} {run.value:.4g}"
                    print(
                        f"  seed {seed} {mode} {run.number:>2} lr {run.parameters[LR]:.2e} "
                        f"{run.steps:>3} steps: {status}"
                    )
    return results


def compare(full: dict[str, Any], fast: dict[str, Any]) -> dict[str, Any]:
    """ASHA against the full search, and whether each target holds."""
    ratio = fast["gpu_seconds"] / full["gpu_seconds"]
    gap = 100.0 * (fast["best"] - full["best"]) / abs(full["best"])
    return {
        "gpu_seconds_ratio": round(ratio, 4),
        "steps_ratio": round(fast["steps"] / full["steps"], 4),
        "best_gap_percent": round(gap, 3),
        "targets_met": {
            "best_within_5_percent": gap <= BEST_GAP_TARGET,
            "gpu_seconds_half": ratio <= GPU_SECONDS_TARGET,
        },
    }


def print_seed(seed: int, results: dict[str, Any], verdict: dict[str, Any], where: str) -> None:
    print(f"\nseed {seed}, {where}")
    columns = [  # (title, key, format)
        ("trials", "trials", ">7"),
        ("pruned", "pruned", ">7"),
        ("GPU-s", "gpu_seconds", ">9.2f"),
        ("train-s", "training_seconds", ">9.1f"),
        ("steps", "steps", ">7"),
        (f"best {OBJECTIVE}", "best", ">15.4f"),
        ("best lr", "best_lr", ">10.2e"),
    ]
    columns = [c for c in columns if c[1] in results["full"]]
    print(f"{'':6}" + "".join(f"{title:>{fmt[1:].split('.')[0]}}" for title, _, fmt in columns))
    for mode in ("full", "asha"):
        row = results[mode]
        print(f"{mode:6}" + "".join(f"{row[key]:{fmt}}" for _, key, fmt in columns))
    met = verdict["targets_met"]
    ratio, gap = verdict["gpu_seconds_ratio"], verdict["best_gap_percent"]
    print(f"ASHA / full: GPU-seconds {ratio:.2f}, steps {verdict['steps_ratio']:.2f}")
    print(
        f"target: best within {BEST_GAP_TARGET:.0f}% (gap {gap:+.1f}%): "
        f"{_met(met['best_within_5_percent'])}"
    )
    print(
        f"target: GPU-seconds <= {GPU_SECONDS_TARGET:.0%} (got {ratio:.0%}): "
        f"{_met(met['gpu_seconds_half'])}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--min-steps", type=int, default=10)
    parser.add_argument("--reduction-factor", type=int, default=3)
    parser.add_argument("--seeds", default="0,1,2,3,4", help="the searches' seeds, a,b,c")
    parser.add_argument("--parallel", type=int, default=2, help="trials at once (service)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per sweep (service)")
    parser.add_argument("--service", action="store_true", help="on a real trainplane up")
    parser.add_argument("--verbose", action="store_true", help="every trial (in-process)")
    parser.add_argument("--json", action="store_true", help="end with one line of JSON")
    options = parser.parse_args()
    seeds = [int(seed) for seed in options.seeds.split(",")]

    asha = {
        "algorithm": "asha",
        "min_steps": options.min_steps,
        "reduction_factor": options.reduction_factor,
    }
    modes = {"full": {"algorithm": "none"}, "asha": asha}
    run = run_service if options.service else run_engine
    results = run(modes, options, seeds)

    where = f"trainplane up, {options.parallel} at once" if options.service else "in-process"
    print(f"\n{options.trials} trials x {options.steps} steps, objective {OBJECTIVE} (min)")
    verdicts = {seed: compare(row["full"], row["asha"]) for seed, row in results.items()}
    for seed, row in results.items():
        print_seed(seed, row, verdicts[seed], where)
    held = [seed for seed, v in verdicts.items() if all(v["targets_met"].values())]
    print(
        f"\nverdict: both targets held on {len(held)} of {len(seeds)} seeds"
        f" ({', '.join(map(str, held)) or 'none'})"
    )
    if options.json:
        seeds_json = {str(seed): {**row, **verdicts[seed]} for seed, row in results.items()}
        print(json.dumps({"seeds": seeds_json, "held": len(held), "of": len(seeds)}))
    sys.exit(0)


def _met(met: bool) -> str:
    return "met" if met else "NOT met"


if __name__ == "__main__":
    main()
