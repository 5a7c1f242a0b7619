"""Sweeps from Python: ``train.sweep(...)`` of a decorated function submits a
``kind: sweep`` whose trial is a shipped call with the swept arguments by name,
refusing before anything is queued what cannot apply; ``Client.trials`` reads a
sweep's trials; the shipped call takes a trial's arguments. Against the real
server of ``tests/sdk`` (no scheduler: the sweep stays QUEUED)."""

from __future__ import annotations

import types
from pathlib import Path

import cloudpickle
import pytest

import trainplane
from trainplane.jobs.spec import parse_spec
from trainplane.net import free_port
from trainplane.runtime.shipped import call as shipped_call
from trainplane.sdk.distributed import InvalidOptions
from trainplane.sdk.errors import InvalidRequest
from trainplane.services.sweeps import insert_trial_job
from trainplane.shipped_calls import PAYLOAD_PATH, SHIPPED_FUNCTION, pack_call

LR_SPACE = {"distribution": "log_uniform", "low": 1e-4, "high": 1e-1}


def _given(space: dict) -> dict:
    """A parameter's space as given (the stored spec spells out its unset fields)."""
    return {key: value for key, value in space.items() if value is not None}


def test_a_sweep_of_a_decorated_function_submits_its_call_as_the_trial(admin, project):
    @trainplane.distributed(
        gpus=1,
        client=admin,
        project=project,
        progress=False,
        max_runtime="5m",
        register_model={"name": f"{project}-fit", "alias": "candidate"},
    )
    def fit(ctx, steps: int, lr: float = 0.1, layers: int = 2) -> float:
        return lr * steps

    search = fit.sweep(
        30,
        parameters={"lr": LR_SPACE, "layers": [1, 2], "strategy.type": ["ddp", "fsdp"]},
        objective="loss",
        search={"trials": 4, "parallel": 2, "seed": 3},
        early_stop={"algorithm": "asha", "min_steps": 5, "reduction_factor": 2},
        name="fit-lr",
    )
    job = admin.job(search.job_id)
    assert (job.kind, job.name, job.project, job.status) == ("sweep", "fit-lr", project, "QUEUED")
    spec = job.spec
    # Arguments by name are entrypoint.args paths; a dotted name is a path as it is.
    spaces = {path: _given(space) for path, space in spec["parameters"].items()}
    assert spaces == {
        "entrypoint.args.lr": LR_SPACE,
        "entrypoint.args.layers": {"values": [1, 2]},
        "strategy.type": {"values": ["ddp", "fsdp"]},
    }
    assert spec["objective"] == {"metric": "loss", "mode": "min"}
    assert spec["search"] == {"algorithm": "random", "trials": 4, "parallel": 2, "seed": 3}
    assert spec["early_stop"]["algorithm"] == "asha"
    # The decorator's register_model is the sweep's (the best trial's model).
    assert spec["register_model"] == {"name": f"{project}-fit", "alias": "candidate"}
    trial = spec["trial"]
    assert not {"name", "project", "register_model"} & set(trial)
    assert trial["entrypoint"]["function"] == SHIPPED_FUNCTION
    assert trial["entrypoint"]["args"]["payload"] == PAYLOAD_PATH
    assert trial["resources"]["gpus"] == 1 and trial["max_runtime"] == "5m"
    # The call went once, as the project's bundle that every trial runs.
    assert admin.bundle(project, trial["entrypoint"]["code"]).digest == trial["entrypoint"]["code"]
    # A trial is the template with its values set.
    one = parse_spec(spec).trial_spec({"entrypoint.args.lr": 0.01, "strategy.type": "fsdp"}, 3)
    assert one.entrypoint.args["lr"] == 0.01 and one.strategy.type == "fsdp"
    assert one.name == "fit-lr-3"

    listing = search.trials()
    assert (listing.items, listing.best_trial) == ([], None)
    assert (listing.objective.metric, listing.objective.mode) == ("loss", "min")
    assert repr(search).startswith("<RemoteSweep ") and f"job={search.job_id}" in repr(search)
    assert admin.cancel(search.job_id).status == "CANCELLED"
    with pytest.raises(trainplane.JobFailed):
        search.result()


def test_sweep_options_that_cannot_apply_are_refused_before_anything_is_sent():
    nobody = trainplane.Client(f"http://127.0.0.1:{free_port()}")

    @trainplane.distributed(gpus=1, client=nobody, progress=False)
    def fit(ctx, steps: int, lr: float = 0.1) -> None: ...

    with pytest.raises(InvalidOptions, match=r"'momentum' is not an argument of .*fit.*lr, steps"):
        fit.sweep(parameters={"momentum": [0.9]}, objective="loss", steps=3)
    with pytest.raises(InvalidOptions, match=r"'lr' is both passed to the call and swept"):
        fit.sweep(parameters={"lr": [0.1]}, objective="loss", steps=3, lr=0.2)
    with pytest.raises(InvalidOptions, match=r"'lr': give a list of values or a mapping"):
        fit.sweep(parameters={"lr": 0.1}, objective="loss", steps=3)
    # The spec's own rules, named by field, before the client is used at all.
    with pytest.raises(InvalidOptions, match=r"search.trials: 1 trials cannot cover the grid's 2"):
        fit.sweep(
            parameters={"lr": [0.1, 0.2]},
            objective="loss",
            search={"algorithm": "grid", "trials": 1},
            steps=3,
        )
    with pytest.raises(InvalidOptions, match=r"search.parallel"):
        fit.sweep(parameters={"lr": LR_SPACE}, objective="loss", search={"parallel": 11})


def test_client_trials_lists_a_sweeps_trials_and_refuses_a_plain_job(admin, project, live_server):
    sweep = admin.submit(
        {
            "kind": "sweep",
            "name": "listed",
            "project": project,
            "trial": {
                "kind": "train",
                "entrypoint": {"command": ["python", "-c", "print(1)"]},
                "resources": {"gpus": 1},
            },
            "parameters": {"entrypoint.env.LR": {"values": ["0.1", "0.01"]}},
            "objective": {"metric": "loss"},
        }
    )
    spec = parse_spec(sweep.spec)
    with live_server.sessions() as session, session.begin():
        from trainplane.db.models import Job as JobRow

        row = session.get(JobRow, sweep.id)
        for number, value in enumerate(["0.1", "0.01"], start=1):
            insert_trial_job(
                session,
                row,
                spec.trial_spec({"entrypoint.env.LR": value}, number),
                number=number,
                parameters={"entrypoint.env.LR": value},
                decision_steps=[],
                now=row.created_at,
            )
    listing = admin.trials(sweep.id)
    assert [(t.number, t.name, t.parameters) for t in listing.items] == [
        (1, "listed-1", {"entrypoint.env.LR": "0.1"}),
        (2, "listed-2", {"entrypoint.env.LR": "0.01"}),
    ]
    assert all(t.status == "QUEUED" and not t.pruned for t in listing.items)
    children = list(admin.jobs(parent=sweep.id))
    assert sorted(j.id for j in children) == sorted(t.id for t in listing.items)
    assert {j.parent for j in children} == {sweep.id}
    with pytest.raises(InvalidRequest, match="not a sweep"):
        admin.trials(children[0].id)
    admin.cancel(sweep.id)


def test_the_shipped_call_takes_a_trials_arguments_by_name(tmp_path: Path):
    def fit(ctx, steps: int, lr: float = 0.1) -> tuple[int, float, dict]:
        return steps, lr, ctx.args

    payload = tmp_path / "call.pkl"
    payload.write_bytes(pack_call(cloudpickle.dumps((fit, (30,), {"lr": 0.5})), "fit"))
    ctx = types.SimpleNamespace(args={"payload": str(payload), "function": "fit"})
    assert shipped_call(ctx) == (30, 0.5, {})
    ctx = types.SimpleNamespace(args={"payload": str(payload), "function": "fit", "lr": 0.01})
    assert shipped_call(ctx) == (30, 0.01, {})
