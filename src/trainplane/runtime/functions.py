"""Running a job's train function (``entrypoint.function: module:fn``) on one
rank: build its TrainContext from the attempt's environment and call it."""

from __future__ import annotations

import gc
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import torch

from trainplane.jobs.entrypoints import function_of
from trainplane.jobs.spec import FinetuneSpec, TrainSpec
from trainplane.runtime import env as tp_env
from trainplane.runtime.context import TrainContext
from trainplane.runtime.preemption import Preempted
from trainplane.runtime.reporting import ProgressReporter, decision_steps_of
from trainplane.runtime.results import ResultSender
from trainplane.shipped_calls import SHIPPED_FUNCTION


class EntrypointError(Exception):
    """The train function cannot be found; the message says why."""


def load_function(reference: str) -> Callable[[TrainContext], Any]:
    module_name, _, name = reference.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # the job's working_dir
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EntrypointError(f"entrypoint.function {reference}: cannot import {exc}") from exc
    function = getattr(module, name, None)
    if not callable(function):
        raise EntrypointError(f"entrypoint.function {reference}: {module_name} has no {name}()")
    return function


def run_rank(
    spec: TrainSpec | FinetuneSpec,
    *,
    rank: int,
    local_rank: int,
    world_size: int,
    local_world_size: int,
    node_rank: int,
    device: torch.device,
) -> Any:
    """Call the train function with this rank's context; return what it returns."""
    function = load_function(function_of(spec) or "")
    reporter = None
    decision_steps = decision_steps_of(os.environ)  # the same on every rank
    if rank == 0:
        reporter = ProgressReporter(
            url=os.environ.get(tp_env.CONTROL_PLANE_URL),
            job_id=os.environ.get(tp_env.JOB_ID),
            attempt_id=os.environ.get(tp_env.ATTEMPT_ID),
            token=os.environ.get(tp_env.ATTEMPT_TOKEN),
            metrics_file=os.environ.get(tp_env.METRICS_FILE),
            decision_steps=decision_steps,
        )
    context = TrainContext(
        spec,
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        local_world_size=local_world_size,
        node_rank=node_rank,
        device=device,
        job_id=os.environ.get(tp_env.JOB_ID),
        attempt_id=os.environ.get(tp_env.ATTEMPT_ID),
        checkpoint_root=os.environ.get(tp_env.CHECKPOINT_URI),
        model_root=os.environ.get(tp_env.MODEL_URI),
        reporter=reporter,
        decision_steps=decision_steps,
        # The same on every rank: the control plane answers reports only
        # when there is one to report to.
        watch_stop_requests=bool(
            os.environ.get(tp_env.CONTROL_PLANE_URL) and os.environ.get(tp_env.ATTEMPT_TOKEN)
        ),
    )
    results = ResultSender(required=function_of(spec) == SHIPPED_FUNCTION)
    # What the imports left (torch, trainplane, the job's module: a few hundred
    # thousand objects living as long as the process) is kept out of the
    # collector's full passes, which would scan it all again and again while
    # the training loop allocates: about half the time a step spends there.
    gc.freeze()
    try:
        try:
            result = function(context)
            context.export_model()
        except Preempted:
            raise
        except Exception as exc:
            results.raised(rank, exc)
            raise
        if rank == 0:
            results.returned(rank, result)
        return result
    finally:
        context.close()
