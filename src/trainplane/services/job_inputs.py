"""The files a job will read, checked before it is queued.

A fine-tune's base model and datasets are read here, on the control plane,
at submit and plan time: a missing file, a malformed JSONL line, an empty
eval split or a model that is not a causal LM is a 422 naming the field and
the line, not a failed attempt after minutes of GPU time. Only files are read
(no torch), outside any database transaction, in the request's worker thread
(the routes are sync), with bounded reads (recipes.finetune.inputs), and only
once the caller's role and the locations are checked (services.file_access).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainplane.errors import InvalidInputsError
from trainplane.jobs.spec import FinetuneSpec, TrainSpec
from trainplane.recipes.finetune import inputs

Summary = inputs.DatasetSummary | inputs.ModelSummary


@dataclass(frozen=True)
class InputCheck:
    name: str  # the spec field
    detail: str


@dataclass(frozen=True)
class JobInputs:
    checks: list[InputCheck]  # what was checked, one entry per input
    model_config: dict[str, Any] | None = None  # a fine-tune's base model config.json


def check_job_inputs(spec: TrainSpec | FinetuneSpec) -> JobInputs:
    """Raises InvalidInputsError with every problem found."""
    if not isinstance(spec, FinetuneSpec):
        return JobInputs([])
    checks: list[InputCheck] = []
    problems: list[inputs.InputProblem] = []

    def run(field: str, check: Callable[[str, str], Summary], location: str) -> Summary | None:
        try:
            summary = check(field, location)
        except inputs.InputProblem as problem:
            problems.append(problem)
            return None
        except inputs.InputProblems as many:
            problems.extend(many.problems)
            return None
        checks.append(InputCheck(field, summary.describe()))
        return summary

    model = run("base_model", inputs.check_base_model, spec.base_model)
    train = run("dataset.train", inputs.check_dataset, spec.dataset.train)
    step_rows = spec.hyperparameters.micro_batch_size * spec.resources.gpus
    # Unpadded rows map one to one to samples; packed ones are only known
    # once tokenized, on the workers. A check stopped at its bound saw only
    # part of the rows.
    packed = spec.hyperparameters.packing
    if (
        isinstance(train, inputs.DatasetSummary)
        and train.complete
        and not packed
        and train.rows < step_rows
    ):
        problems.append(
            inputs.InputProblem(
                "dataset.train",
                f"{train.rows} rows are fewer than one step takes: micro_batch_size "
                f"{spec.hyperparameters.micro_batch_size} x {spec.resources.gpus} GPUs "
                f"= {step_rows}",
            )
        )
    if spec.dataset.eval is not None:
        run("dataset.eval", inputs.check_dataset, spec.dataset.eval)
    if problems:
        raise InvalidInputsError([(p.field, p.message) for p in problems])
    config = model.config if isinstance(model, inputs.ModelSummary) else None
    return JobInputs(checks, config)
