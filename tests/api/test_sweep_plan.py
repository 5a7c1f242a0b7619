"""``plan`` of a sweep against the real app and database: the search's trials,
GPUs and worst-case cost, its largest trial's placement, the CLI's rendering,
and a sweep that cannot run refused with the field named."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from tests.factories import EXAMPLES, make_cluster
from trainplane.cli.plan import print_plan
from trainplane.db.models import Job

TRIAL = {
    "kind": "train",
    "entrypoint": {"function": "train:train_loop", "working_dir": str(EXAMPLES / "mlp")},
    "resources": {"gpus": 1},
    "max_runtime": "30m",
}


def _sweep(**fields):
    return {
        "kind": "sweep",
        "name": "lr-plan",
        "trial": TRIAL,
        "parameters": {
            "entrypoint.args.lr": {"distribution": "log_uniform", "low": 1e-4, "high": 0.1},
            "resources.gpus": {"values": [1, 2]},
        },
        "objective": {"metric": "loss"},
        "search": {"algorithm": "random", "trials": 8, "parallel": 3},
        **fields,
    }


@pytest.fixture
def priced(session):
    return make_cluster(session, "a100", gpus=8, accelerator="A100", price_per_gpu_hour=2.0)


def test_a_sweep_plan_shows_its_trials_gpus_and_worst_case_cost(api, session, priced, capsys):
    answer = api.post("/v1/jobs/plan", json=_sweep())
    assert answer.status_code == 200, answer.text
    plan = answer.json()
    assert plan["spec"]["kind"] == "sweep" and plan["spec"]["name"] == "lr-plan"
    sweep = plan["sweep"]
    assert sweep["trials"] == 8 and sweep["parallel"] == 3
    assert sweep["gpus_per_trial"] == {"min": 1, "max": 2}
    assert sweep["peak_gpus"] == 6
    assert sweep["worst_case_gpu_hours"] == pytest.approx(8 * 2 * 0.5)
    assert sweep["worst_case_cost"] == pytest.approx(8 * 2 * 0.5 * 2.0)
    assert sweep["trial"].startswith("lr-plan-1") and "2 GPUs" in sweep["trial"]
    # The rest is the largest trial's: placed now on the cluster, costed there.
    assert plan["placement"]["can_start_now"] and plan["placement"]["cluster"] == "a100"
    assert plan["cost"]["max_cost"] == pytest.approx(2 * 0.5 * 2.0)
    print_plan(plan)
    shown = capsys.readouterr().out
    assert "valid: sweep lr-plan" in shown
    assert "sweep: 8 trials, 3 at once, 1..2 GPUs per trial, peak 6 GPUs" in shown
    assert "worst case: 8 GPU-hours, cost 16.00" in shown
    with session.begin():
        assert session.scalar(select(func.count()).select_from(Job)) == 0  # nothing created


def test_a_sweep_without_max_runtime_is_unbounded(api, priced):
    trial = {k: v for k, v in TRIAL.items() if k != "max_runtime"}
    sweep = api.post("/v1/jobs/plan", json=_sweep(trial=trial)).json()["sweep"]
    assert sweep["worst_case_gpu_hours"] is None and sweep["worst_case_cost"] is None
    assert sweep["basis"] == "unbounded: set trial.max_runtime"


def test_a_sweep_that_cannot_run_is_refused_naming_the_field(api, priced):
    bad_path = _sweep(parameters={"resources.colour": {"values": ["red"]}})
    answer = api.post("/v1/jobs/plan", json=bad_path)
    assert answer.status_code == 422, answer.text
    error = answer.json()["errors"][0]
    assert error["field"] == "parameters.resources.colour"
    assert "not a field of the trial spec" in error["message"]
    # The trial's own checks, named in the sweep's spec.
    elsewhere = {**TRIAL, "entrypoint": {**TRIAL["entrypoint"], "working_dir": "/nowhere/at/all"}}
    answer = api.post("/v1/jobs/plan", json=_sweep(trial=elsewhere))
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"][0]["field"] == "trial.entrypoint.working_dir"
