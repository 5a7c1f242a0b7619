"""The spec crosses each process boundary (the driver, each rank) as JSON and
is parsed there once: its defaults come from the spec models alone, and a
spec that does not parse is refused naming the field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from trainplane.jobs.spec import FinetuneSpec, SpecError, TrainSpec, load_spec, parse_spec
from trainplane.runtime import env as tp_env
from trainplane.runtime import local
from trainplane.runtime.context import TrainContext
from trainplane.runtime.driver import EXIT_BAD_SPEC
from trainplane.runtime.process_groups import bookkeeping_timeout, training_timeout
from trainplane.runtime.threads import offloads_to_host, threads_for_rank

pytestmark = pytest.mark.ray_free

TERSE = {"kind": "train", "name": "terse", "entrypoint": {"function": "train:train_loop"}}
# TERSE with every default it relies on written out.
SPELLED_OUT = {
    "kind": "train",
    "name": "terse",
    "project": "default",
    "entrypoint": {
        "function": "train:train_loop",
        "args": {},
        "working_dir": ".",
        "env": {},
        "secrets": {},
        "pip": [],
    },
    "resources": {"gpus": 1, "cpus_per_worker": 1},
    "strategy": {"type": "ddp"},
    "precision": None,
    "checkpoint": {"keep_last": 3, "resume": "auto"},
    "retries": {"max_restarts": 0, "backoff_seconds": 30},
    "priority": "normal",
    "optimization": {"grad_accum": 1, "max_grad_norm": None},
    "tracking": {"tags": {}},
}


def _stored(document: dict[str, Any]) -> str:
    """What the driver is handed: the API's validated dump, as JSON."""
    return json.dumps(parse_spec(document).model_dump(mode="json"))


def _as_the_runtime_sees_it(spec: TrainSpec | FinetuneSpec) -> dict[str, Any]:
    context = TrainContext(spec, rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))
    policy = context._checkpointer.policy
    return {
        "args": context.args,
        "strategy": context.strategy,
        "precision": context.precision,
        "grad_accum": context.grad_accum,
        "max_grad_norm": context.max_grad_norm,
        "checkpoint": (policy.every_steps, policy.keep_last, policy.keep_best, policy.resume),
        "exports": context._export is not None,
        "offloads": offloads_to_host(spec),
        "threads": threads_for_rank(spec, on_gpu=True, local_world_size=1, cpus=8),
        "timeouts": (training_timeout(spec), bookkeeping_timeout(spec)),
        "workers": (spec.resources.gpus, spec.resources.cpus_per_worker),
    }


def test_defaults_omitted_or_spelled_out_reach_the_runtime_as_the_same_values():
    terse = load_spec(json.loads(_stored(TERSE)))
    spelled_out = load_spec(json.loads(_stored(SPELLED_OUT)))
    assert terse == spelled_out
    seen = _as_the_runtime_sees_it(terse)
    assert seen == _as_the_runtime_sees_it(spelled_out)
    assert seen["strategy"] == "ddp" and seen["precision"] == "fp32"
    assert seen["grad_accum"] == 1 and seen["checkpoint"] == (None, 3, None, "auto")
    # Parsing the stored form again changes nothing: what the server stored parses.
    assert load_spec(terse.model_dump(mode="json")) == terse


def test_a_fine_tunes_stored_spec_parses_again_with_its_filled_in_defaults():
    document = {
        "kind": "finetune",
        "name": "ft",
        "base_model": "/models/base",
        "dataset": {"train": "/data/train.jsonl"},
        "method": "lora",
    }
    spec = load_spec(json.loads(_stored(document)))
    assert isinstance(spec, FinetuneSpec)
    assert (spec.method.r, spec.method.alpha, spec.method.dropout) == (8, 16.0, 0.05)
    assert spec.hyperparameters.epochs == 1.0 and spec.hyperparameters.max_steps is None


def test_a_spec_that_does_not_parse_is_refused_naming_the_field():
    bad = {**TERSE, "resources": {"gpus": 0}}
    with pytest.raises(SpecError, match=r"`resources\.gpus` must be at least 1"):
        load_spec(bad)
    with pytest.raises(SpecError, match=r"`strategy\.type` must be one of `ddp`"):
        load_spec({**TERSE, "strategy": {"type": "zero"}})


def test_the_driver_exits_naming_the_field_of_a_spec_that_does_not_parse():
    env = {
        **os.environ,
        tp_env.SUPERVISOR_PID: str(os.getpid()),
        tp_env.SPEC: json.dumps({**TERSE, "resources": {"gpus": 2, "cpus_per_worker": -1}}),
    }
    done = subprocess.run(
        [sys.executable, "-m", "trainplane.runtime.driver"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == EXIT_BAD_SPEC, done.stdout + done.stderr
    assert "`resources.cpus_per_worker` must be greater than 0" in done.stdout


def test_a_rank_process_writes_the_field_to_its_error_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    error_file = tmp_path / "error"
    monkeypatch.setenv(tp_env.SPEC, json.dumps({**TERSE, "checkpoint": {"keep_last": 0}}))
    monkeypatch.setenv(tp_env.ERROR_FILE, str(error_file))
    assert local.main([]) == 1
    assert "SpecError" in error_file.read_text()
    assert "`checkpoint.keep_last` must be at least 1" in (error_file.read_text())
