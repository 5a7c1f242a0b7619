"""Ray Train's restarts in place, spent from the job's one restart budget.

Ray Train restarts a worker group after a worker failed, and tries placing
one again after the cluster could not, by limits of its own for each kind and
without telling anyone. trainplane's budget is one for all restarts
(jobs.retries): this callback runs in Ray Train's controller, where each retry
is decided, numbers every retry, reports it with the attempt's token before
it happens (runtime.reporting), and ends the run once the attempt's share of
the budget (``TRAINPLANE_RESTARTS_LEFT``) is spent, whichever kind spent it.

It builds on Ray Train's controller callbacks (a developer API: the public
``UserCallback`` hears of worker exceptions only, not of placement retries nor
of which failures are retried). Ray Train's own handling of node preemptions
is not a failure and is not counted, as its FailureConfig does not.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from ray.train.v2._internal.execution.callback import ControllerCallback
from ray.train.v2._internal.execution.controller.state import (
    ReschedulingState,
    RestartingState,
)
from ray.train.v2.api.exceptions import PreemptionError, WorkerGroupError

from trainplane.jobs.progress import RESTART_WORDS
from trainplane.runtime.reporting import report_restart
from trainplane.runtime.start_events import mark

RestartKind = Literal["worker_group", "placement"]


class RestartBudgetSpent(RuntimeError):
    """The run would restart once more than the attempt may. The message is
    the account of the failure that would have been retried."""


class RestartBudget(ControllerCallback):
    """Counts the retries of one attempt's run, ``restarts_left`` at most."""

    def __init__(self, restarts_left: int) -> None:
        self.restarts_left = restarts_left
        self.used = 0

    def after_controller_start(self, train_run_context: Any) -> None:
        mark("controller running")

    def after_controller_state_update(self, previous_state: Any, current_state: Any) -> None:
        mark(f"controller {type(current_state).__name__}")
        kind = retry_kind(current_state)
        if kind is None:
            return
        error = current_state.training_failed_error
        if is_preemption(error):
            return
        from trainplane.runtime.ray_train import failure_cause

        cause = failure_cause(error)
        if self.used >= self.restarts_left:
            # Raised here, Ray Train ends the run with this as its error
            # instead of retrying (runtime.ray_train.failure_cause reads it).
            raise RestartBudgetSpent(cause)
        self.used += 1
        print(
            f"trainplane: {RESTART_WORDS[kind]} ({self.used} of the {self.restarts_left} "
            f"restart(s) this attempt may use): {cause}",
            flush=True,
        )
        report_restart(kind, self.used, cause, environ=os.environ)


def retry_kind(state: Any) -> RestartKind | None:
    """Which retry the controller's new state is, if it is one: Ray Train
    enters these two states only when it decided to retry."""
    if isinstance(state, RestartingState):
        return "worker_group"
    if isinstance(state, ReschedulingState):
        return "placement"
    return None


def is_preemption(error: BaseException | None) -> bool:
    """A node preemption, which Ray Train retries without counting it (a
    failed worker whose actor died with its node preempted)."""
    if isinstance(error, PreemptionError):
        return True
    if not isinstance(error, WorkerGroupError):
        return False
    for failure in error.worker_failures.values():
        cause = getattr(failure, "health_check_failure", failure)
        if getattr(cause, "preempted", False) is True:
            return True
    return False
