"""Ray Train's retries counted against the attempt's share of the restart
budget and reported with the attempt's token: the controller callback driven
with Ray Train's own state and error objects, reporting to a recording
endpoint (the whole path through a real Ray Train run: test_training)."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pytest
from ray.exceptions import RayActorError
from ray.train.v2._internal.exceptions import WorkerGroupStartupTimeoutError
from ray.train.v2._internal.execution.controller.state import (
    ReschedulingState,
    RestartingState,
    RunningState,
)
from ray.train.v2.api.exceptions import ControllerError, PreemptionError, WorkerGroupError

from tests.runtime.test_reporting import endpoint  # noqa: F401  (the recording endpoint)
from trainplane.runtime import env as tp_env
from trainplane.runtime.ray_train import RankFailed, failure_cause
from trainplane.runtime.reporting import report_restart
from trainplane.runtime.restart_budget import RestartBudget, RestartBudgetSpent

pytestmark = pytest.mark.ray_free


def crashed(rank: int = 1) -> RestartingState:
    failure = RankFailed(f"rank {rank} failed: exit code 3", 1.0)
    return RestartingState(training_failed_error=WorkerGroupError("x", {rank: failure}))


def unplaced() -> ReschedulingState:
    return ReschedulingState(
        training_failed_error=ControllerError(WorkerGroupStartupTimeoutError(2))
    )


@pytest.fixture
def attempt_env(endpoint, monkeypatch):  # noqa: F811
    url, recorder = endpoint
    for name, value in {
        tp_env.CONTROL_PLANE_URL: url,
        tp_env.JOB_ID: "job1",
        tp_env.ATTEMPT_ID: "att1",
        tp_env.ATTEMPT_TOKEN: "secret",
    }.items():
        monkeypatch.setenv(name, value)
    return recorder


def test_each_retry_is_numbered_and_reported_with_its_kind_and_cause(attempt_env) -> None:
    budget = RestartBudget(restarts_left=2)
    budget.after_controller_state_update(RunningState(), crashed())
    budget.after_controller_state_update(RunningState(), unplaced())
    restarts = [body["restarts"] for body in attempt_env.bodies]
    assert [(r["kind"], r["number"]) for (r,) in restarts] == [
        ("worker_group", 1),
        ("placement", 2),
    ]
    assert restarts[0][0]["error"] == "rank 1 failed: exit code 3"
    assert "did not place the 2 workers" in restarts[1][0]["error"]
    assert attempt_env.headers == ["Bearer secret", "Bearer secret"]
    assert all(set(body) == {"points", "restarts"} for body in attempt_env.bodies)


def test_the_budget_is_one_for_both_kinds(attempt_env) -> None:
    """Ray Train would allow restarts_left of each kind; the attempt gets
    restarts_left in all."""
    budget = RestartBudget(restarts_left=1)
    budget.after_controller_state_update(RunningState(), crashed())
    with pytest.raises(RestartBudgetSpent) as spent:
        budget.after_controller_state_update(RunningState(), unplaced())
    assert "did not place the 2 workers" in str(spent.value)
    assert budget.used == 1 and len(attempt_env.bodies) == 1
    # What the driver reports as the attempt's failure: the one not retried.
    assert "did not place" in failure_cause(ControllerError(spent.value))


def test_no_budget_means_no_retry(attempt_env) -> None:
    with pytest.raises(RestartBudgetSpent, match="rank 0 failed"):
        RestartBudget(restarts_left=0).after_controller_state_update(RunningState(), crashed(0))
    assert attempt_env.bodies == []


def test_preemptions_and_other_states_spend_nothing(attempt_env) -> None:
    budget = RestartBudget(restarts_left=0)
    preempted_node = WorkerGroupError("x", {0: RayActorError(preempted=True)})
    for state in (
        RunningState(),
        RestartingState(training_failed_error=preempted_node),
        RestartingState(
            training_failed_error=PreemptionError(SimpleNamespace(preempted_ranks=[0]))
        ),
    ):
        budget.after_controller_state_update(RunningState(), state)
    assert budget.used == 0 and attempt_env.bodies == []


def test_the_callback_travels_to_ray_trains_controller() -> None:
    budget = pickle.loads(pickle.dumps(RestartBudget(restarts_left=3)))
    assert (budget.restarts_left, budget.used) == (3, 0)


def test_a_refused_report_is_not_sent_again(endpoint) -> None:  # noqa: F811
    url, recorder = endpoint
    recorder.answer = 409  # the attempt is over as far as the control plane knows
    environ = {
        tp_env.CONTROL_PLANE_URL: url,
        tp_env.JOB_ID: "job1",
        tp_env.ATTEMPT_ID: "att1",
        tp_env.ATTEMPT_TOKEN: "secret",
    }
    assert not report_restart("worker_group", 1, "boom", environ=environ)
    assert len(recorder.bodies) == 1
    # Without a control plane (a local run) nothing is sent.
    assert not report_restart("worker_group", 1, "boom", environ={})
    assert len(recorder.bodies) == 1
