"""``trainplane init [train|finetune|sweep]``: a commented ``job.yaml`` to
start from, valid as written (``trainplane plan job.yaml`` accepts it) and
explaining the fields a first job needs; docs/spec.md has every field."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from trainplane.cli.common import EXIT_USAGE, fail, say

TRAIN = """\
# A training job: `trainplane plan job.yaml` checks it, `trainplane submit job.yaml --wait`
# runs it. Every field: docs/spec.md.
kind: train
name: {name}                 # lowercase letters, digits and dashes; `trainplane jobs get {name}`
project: default             # the project it belongs to (its quotas, secrets, storage)
entrypoint:
  # One of: command (any program, run once per worker with torchrun's variables),
  # script (a Python file), or function (module:function called with a TrainContext).
  command: [python, train.py]
  working_dir: .             # this folder, shipped to the cluster
  env: {{LOG_LEVEL: info}}     # environment variables of every worker
resources:
  gpus: 2                    # workers; on a CPU cluster, CPU worker slots
  # gpus_per_node: 8         # default: all on one node
  # gpu_type: H100           # only clusters with this accelerator
strategy:
  type: ddp                  # ddp, fsdp, deepspeed or auto (picks from the model's size)
checkpoint:
  every_steps: 100           # how often a function job saves (and resumes from) a checkpoint
  keep_last: 2
retries:
  max_restarts: 1            # restarts after a failure or a lost node
max_runtime: 1h              # stopped (FAILED) after this long
"""

FINETUNE = """\
# A fine-tune of a Hugging Face causal LM on prompt/completion pairs.
# `trainplane plan job.yaml` checks it (the model and datasets must exist),
# `trainplane submit job.yaml --wait --fail-on "eval_loss>2"` gates on the result.
kind: finetune
name: {name}
project: default
base_model: ./base-model       # a local folder (uploaded) or s3://bucket/models/...
dataset:
  train: train.jsonl           # one {{"prompt": ..., "completion": ...}} per line
  eval: eval.jsonl
method:
  type: lora                   # lora, or full
  r: 8
  alpha: 16
hyperparameters:
  learning_rate: 0.0002
  max_steps: 200
  micro_batch_size: 8
  max_seq_len: 512
  eval_every_steps: 50
resources:
  gpus: 2
strategy:
  type: auto                   # picks ddp, fsdp or deepspeed from the model's size
checkpoint:
  every_steps: 100
  keep_last: 2
# register_model: {{name: {name}, alias: candidate}}   # into MLflow's registry
"""

SWEEP = """\
# A hyperparameter search: each trial is an ordinary job made from `trial`
# with the parameters set. `trainplane submit job.yaml --wait`, then
# `trainplane jobs trials {name}`.
kind: sweep
name: {name}
project: default
trial:                         # a train spec without name and project
  kind: train
  entrypoint:
    command: [python, train.py]
    args: {{lr: 0.001}}          # the trials set entrypoint.args.lr
    working_dir: .
  resources:
    gpus: 1
  max_runtime: 30m
parameters:                    # dotted paths into `trial`, as --set takes them
  entrypoint.args.lr: {{distribution: log_uniform, low: 1.0e-5, high: 1.0e-2}}
objective: {{metric: loss, mode: min}}   # a metric the trials report
search: {{algorithm: random, trials: 8, parallel: 2, seed: 0}}
early_stop: {{algorithm: asha, min_steps: 10, reduction_factor: 2}}
"""


class Kind(StrEnum):
    train = "train"
    finetune = "finetune"
    sweep = "sweep"


TEMPLATES = {Kind.train: TRAIN, Kind.finetune: FINETUNE, Kind.sweep: SWEEP}


def template(kind: Kind, name: str) -> str:
    return TEMPLATES[kind].format(name=name)


def init(
    kind: Annotated[Kind, typer.Argument(help="train, finetune or sweep.")] = Kind.train,
    file: Annotated[Path, typer.Option("--file", "-f", help="Where to write the spec.")] = Path(
        "job.yaml"
    ),
    name: Annotated[str | None, typer.Option(help="The job's name (default: my-KIND).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file.")] = False,
) -> None:
    """Write a commented job spec to start from; `trainplane plan` accepts it as it is."""
    if file.exists() and not force:
        raise fail(f"{file} exists; --force replaces it", EXIT_USAGE)
    file.write_text(template(kind, name or f"my-{kind.value}"))
    say(f"wrote {file}: edit it, then `trainplane plan {file}` and `trainplane submit {file}`")
