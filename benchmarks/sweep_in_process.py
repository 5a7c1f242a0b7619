"""A sweep run in this process, for benchmarks/sweep_savings.py: trainplane's
search engine (``trainplane.jobs.sweep_search``) driven the way the service's
sweep controller and pruning path drive it, one trial at a time (``parallel:
1``), each trial its own spec (``SweepSpec.trial_spec``) run by a real
``TrainContext``, a world of one on the CPU.

What the service does with a trial's progress reports is done here by the
trial's reporter: at each decision step newly reached, the first objective
value reported at or past it is judged, and a pruned trial is answered "stop"
as the service answers it, which its TrainContext turns into ``Preempted``.

GPU-seconds: the trial's CPU time (its process runs one thread, so this is
its compute, steadier than wall time on a shared machine) from building its
context to its end, less the time spent judging it (the server's work),
times its GPUs.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from trainplane.jobs.entrypoints import function_of
from trainplane.jobs.spec import load_sweep_spec
from trainplane.jobs.sweep_search import TrialRecord, Verdict, best, decision_steps, judge, propose
from trainplane.jobs.sweep_spec import SweepSpec
from trainplane.net import free_port
from trainplane.runtime.context import TrainContext
from trainplane.runtime.functions import load_function
from trainplane.runtime.preemption import PRUNED_REASON, Preempted
from trainplane.runtime.reporting import ProgressReporter

JudgeAt = Callable[[int, float], Verdict]  # (decision step, objective value) -> verdict


@dataclass
class TrialRun:
    number: int
    parameters: dict[str, Any]
    steps: int
    gpu_seconds: float
    value: float  # the last objective value reported
    pruned: str  # the reason, "" when it ran to the end


class JudgingChannel(ProgressReporter):
    """A trial's progress channel that, instead of sending its reports, does
    what the service's pruning path does with them."""

    def __init__(self, spec: SweepSpec, judge_at: JudgeAt | None) -> None:
        super().__init__(url=None, job_id=None, attempt_id=None, token=None)
        self.metric = spec.objective.metric
        self.pending = decision_steps(spec) if judge_at is not None else []
        self.judge_at = judge_at
        self.last = float("nan")
        self.pruned = ""
        self.judging_seconds = 0.0

    def record_points(
        self, points: Sequence[tuple[int, float, dict[str, float]]], total_steps: int | None
    ) -> None:
        for step, _, metrics in points:
            if self.metric not in metrics:
                continue
            self.last = float(metrics[self.metric])
            while self.pending and self.pending[0] <= step and not self.pruned:
                assert self.judge_at is not None
                started = time.process_time()
                verdict = self.judge_at(self.pending.pop(0), self.last)
                self.judging_seconds += time.process_time() - started
                if verdict.prune:
                    self.pruned, self.stop_reason = verdict.reason, PRUNED_REASON


@contextlib.contextmanager
def world_of_one() -> Iterator[None]:
    """torch.distributed as a one-worker job has it (its DDP wrapper needs a
    process group), on one thread: one trial's worth of compute."""
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def train_trial(
    spec: SweepSpec, parameters: dict[str, Any], number: int, judge_at: JudgeAt | None
) -> TrialRun:
    """Trial ``number`` of the sweep with ``parameters``, to its end or until
    pruned; inside :func:`world_of_one`."""
    started = time.process_time()
    trial = spec.trial_spec(parameters, number)
    working_dir = trial.entrypoint.working_dir
    if working_dir and working_dir not in sys.path:
        sys.path.insert(0, working_dir)  # as it is the worker's directory
    function = load_function(function_of(trial) or "")
    channel = JudgingChannel(spec, judge_at)
    context = TrainContext(
        trial,
        rank=0,
        local_rank=0,
        world_size=1,
        device=torch.device("cpu"),
        reporter=channel,
        watch_stop_requests=True,
        decision_steps=decision_steps(spec),
    )
    with contextlib.redirect_stdout(io.StringIO()):  # the trial's own log lines
        try:
            function(context)
        except Preempted:
            pass  # pruned: the channel has the reason
        finally:
            context.close()
    seconds = time.process_time() - started - channel.judging_seconds
    gpus = trial.resources.gpus
    return TrialRun(
        number, parameters, context.global_step, seconds * gpus, channel.last, channel.pruned
    )


def sweep_trials(document: dict[str, Any]) -> Iterator[TrialRun]:
    """Every trial of the sweep ``document``, one after the other, each as it
    ends: propose from the records, judge at each decision step with the
    trial's own record among them, keep the search state judge returns, as
    the service does."""
    spec = load_sweep_spec(document)
    records: list[TrialRecord] = []
    for number in range(1, spec.trial_count + 1):
        parameters = propose(spec, records, number)
        assert parameters is not None
        records.append(TrialRecord(number, parameters, "running", None, {}, {}))

        def judge_step(step: int, value: float, number: int = number) -> Verdict:
            own = records[number - 1]
            verdict = judge(spec, records, number, step, value)
            intermediate = {**own.intermediate, step: value}
            records[number - 1] = TrialRecord(
                number, own.parameters, "running", None, intermediate, verdict.search_state
            )
            return verdict

        run = train_trial(spec, parameters, number, judge_step)
        own = records[number - 1]
        records[number - 1] = TrialRecord(
            number,
            own.parameters,
            "pruned" if run.pruned else "succeeded",
            None if run.pruned else run.value,
            own.intermediate,
            own.search_state,
        )
        yield run
    assert best(spec, records) is not None, "no trial of the sweep succeeded"
