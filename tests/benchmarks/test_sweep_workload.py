"""benchmarks/sweep_workload.py, the trial of benchmarks/sweep_savings.py, and
benchmarks/sweep_in_process.py, which runs it: noisy labels keep the held-out
loss above the teacher's entropy, the schedule follows the planned horizon,
and a trial run in this process reports its held-out loss and stops at the
decision step where it is pruned. Tiny trials, a world of one, no timings."""

from __future__ import annotations

import importlib.util
import itertools
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from trainplane.jobs.spec import load_sweep_spec
from trainplane.jobs.sweep_search import Verdict

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


workload = load("sweep_workload")
in_process = load("sweep_in_process")


def small(**args: Any) -> dict[str, Any]:
    return {**workload.DEFAULTS, "samples": 512, "val_samples": 256, "hidden": 32, **args}


def test_labels_are_noisy_so_no_model_reaches_zero_held_out_loss() -> None:
    train, held_out, floor = workload.make_data(small())
    again, _, _ = workload.make_data(small())
    other, _, _ = workload.make_data(small(data_seed=1))
    assert len(train) == 512 and len(held_out) == 256
    assert torch.equal(train.tensors[1], again.tensors[1])  # the data depend on data_seed only
    assert not torch.equal(train.tensors[0], other.tensors[0])
    assert 0.3 < floor < math.log(workload.DEFAULTS["classes"])
    # The labelling teacher itself, the best possible model, scores about the floor.
    teacher = workload.Teacher(32, 10, torch.Generator().manual_seed(0))
    inputs, labels = held_out.tensors
    loss = torch.nn.functional.cross_entropy(
        teacher(inputs) / workload.DEFAULTS["temperature"], labels
    )
    assert float(loss) == pytest.approx(floor, abs=0.15)


def test_the_schedule_warms_up_then_decays_over_the_planned_horizon() -> None:
    factors = [workload.schedule(step, 5, 100, "cosine") for step in range(101)]
    assert factors[0] == pytest.approx(0.2) and factors[4] == pytest.approx(1.0)
    assert factors[5] == pytest.approx(1.0) and factors[100] == pytest.approx(0.0)
    assert all(a >= b for a, b in itertools.pairwise(factors[5:]))
    assert factors[52] == pytest.approx(0.5, abs=0.02)  # halfway after the warmup
    assert workload.schedule(90, 5, 100, "constant") == 1.0


def sweep(steps: int, early_stop: dict[str, Any]) -> Any:
    return load_sweep_spec(
        {
            "kind": "sweep",
            "name": "workload",
            "trial": {
                "kind": "train",
                "entrypoint": {
                    "function": "sweep_workload:train_loop",
                    "args": {"steps": steps, **small(steps=steps)},
                    "working_dir": str(BENCHMARKS),
                },
            },
            "parameters": {
                "entrypoint.args.lr": {"distribution": "log_uniform", "low": 1e-4, "high": 0.1}
            },
            "objective": {"metric": "val_loss", "mode": "min"},
            "search": {"algorithm": "random", "trials": 2},
            "early_stop": early_stop,
        }
    )


def test_a_trial_reports_its_held_out_loss_and_stops_where_it_is_pruned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    _, _, floor = workload.make_data(small())
    asha = {"algorithm": "asha", "min_steps": 10, "reduction_factor": 3}
    judged: list[tuple[int, float]] = []

    def prune_at_first_rung(step: int, value: float) -> Verdict:
        judged.append((step, value))
        return Verdict(prune=True, reason=f"pruned at step {step}", search_state={})

    with in_process.world_of_one():
        untrained = in_process.train_trial(
            sweep(1, {"algorithm": "none"}), {"entrypoint.args.lr": 1e-9}, 1, None
        )
        trained = in_process.train_trial(
            sweep(40, {"algorithm": "none"}), {"entrypoint.args.lr": 3e-3}, 2, None
        )
        pruned = in_process.train_trial(
            sweep(40, asha), {"entrypoint.args.lr": 3e-3}, 3, prune_at_first_rung
        )
    assert trained.steps == 40 and not trained.pruned
    assert floor < trained.value < untrained.value  # it learned, down to no less than the noise
    assert trained.gpu_seconds > 0
    # Judged once, at the first rung, on the value reported there; then stopped.
    assert [step for step, _ in judged] == [10]
    assert pruned.steps == 10 and pruned.pruned == "pruned at step 10"
    assert pruned.value == judged[0][1]
