"""A sweep through the HTTP API, on every backend: submitted (201, a 422 that
names the field), its trials listed by ``GET /v1/jobs/{id}/trials`` and by
``GET /v1/jobs?parent=``, its best trial and counts on the sweep, and the
trials route's 404 and 422. (Who may read it: test_authorization.)"""

from __future__ import annotations

from sqlalchemy import update

from tests.factories import EXAMPLES, small_spec
from trainplane.db.base import utcnow
from trainplane.db.models import Job, SweepTrial
from trainplane.jobs.spec import load_sweep_spec
from trainplane.services.sweeps import insert_trial_job

SWEEP = {
    "kind": "sweep",
    "name": "lr",
    "trial": {
        "kind": "train",
        "entrypoint": {
            "function": "train:train_loop",
            "working_dir": str(EXAMPLES / "mlp"),
            "args": {"steps": 30},
        },
        "resources": {"gpus": 1},
    },
    "parameters": {"entrypoint.args.lr": {"values": [0.1, 0.01, 0.001]}},
    "objective": {"metric": "loss", "mode": "min"},
    "search": {"algorithm": "grid", "parallel": 2},
}


def add_trial(session, sweep_id: str, number: int, lr: float, status: str, **columns) -> str:
    with session.begin():
        sweep = session.get_one(Job, sweep_id)
        parameters = {"entrypoint.args.lr": lr}
        spec = load_sweep_spec(sweep.spec).trial_spec(parameters, number)
        trial_id = insert_trial_job(
            session,
            sweep,
            spec,
            number=number,
            parameters=parameters,
            decision_steps=[10],
            now=utcnow(),
        ).id
        session.execute(update(Job).where(Job.id == trial_id).values(status=status))
        session.execute(update(SweepTrial).where(SweepTrial.job_id == trial_id).values(**columns))
    return trial_id


def test_a_sweeps_trials_are_listed_with_its_objective_and_best(api, session):
    created = api.post("/v1/jobs", json=SWEEP)
    assert created.status_code == 201, created.text
    sweep = created.json()
    assert (sweep["kind"], sweep["parent"], sweep["best_trial"]) == ("sweep", None, None)
    assert sweep["trials"] == {"running": 0, "succeeded": 0, "pruned": 0, "failed": 0}
    first = add_trial(
        session,
        sweep["id"],
        1,
        0.1,
        "SUCCEEDED",
        last_value=0.8,
        best_value=0.7,
        last_step=30,
        values={"10": 1.2},
    )
    second = add_trial(session, sweep["id"], 2, 0.01, "SUCCEEDED", last_value=0.4, last_step=30)
    third = add_trial(
        session, sweep["id"], 3, 0.001, "CANCELLED", last_value=2.5, pruned_reason="pruned at 10"
    )
    other = api.post("/v1/jobs", json=small_spec("plain", 1)).json()["id"]

    listed = api.get(f"/v1/jobs/{sweep['id']}/trials")
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert body["objective"] == {"metric": "loss", "mode": "min"}
    assert [(t["id"], t["name"], t["number"], t["status"]) for t in body["items"]] == [
        (first, "lr-1", 1, "SUCCEEDED"),
        (second, "lr-2", 2, "SUCCEEDED"),
        (third, "lr-3", 3, "CANCELLED"),
    ]
    one = body["items"][0]
    assert one["parameters"] == {"entrypoint.args.lr": 0.1}
    assert (one["objective"], one["last_value"], one["best_value"], one["step"]) == (
        "loss",
        0.8,
        0.7,
        30,
    )
    assert one["values"] == {"10": 1.2}
    assert (one["gpu_hours"], one["cost"]) == (0.0, 0.0)
    best = {
        "id": second,
        "name": "lr-2",
        "number": 2,
        "parameters": {"entrypoint.args.lr": 0.01},
        "objective": {"metric": "loss", "value": 0.4},
    }
    assert body["best_trial"] == best

    read = api.get(f"/v1/jobs/{sweep['id']}").json()
    assert read["best_trial"] == best
    assert read["trials"] == {"running": 0, "succeeded": 2, "pruned": 1, "failed": 0}
    assert api.get(f"/v1/jobs/{first}").json()["parent"] == sweep["id"]
    assert api.get(f"/v1/jobs/{other}").json()["trials"] is None

    children = api.get("/v1/jobs", params={"parent": sweep["id"]}).json()["items"]
    assert [j["id"] for j in children] == [third, second, first]  # newest first
    assert {j["parent"] for j in children} == {sweep["id"]}
    page = api.get("/v1/jobs", params={"parent": sweep["id"], "limit": 2}).json()
    rest = api.get("/v1/jobs", params={"parent": sweep["id"], "cursor": page["next_cursor"]}).json()
    assert [j["id"] for j in page["items"] + rest["items"]] == [third, second, first]
    everything = {j["id"] for j in api.get("/v1/jobs").json()["items"]}
    assert everything == {sweep["id"], first, second, third, other}


def test_the_trials_of_a_job_that_is_not_a_sweep(api):
    plain = api.post("/v1/jobs", json=small_spec("plain", 1)).json()["id"]
    refused = api.get(f"/v1/jobs/{plain}/trials")
    assert refused.status_code == 422
    assert "not a sweep" in refused.json()["detail"]
    missing = api.get("/v1/jobs/01nosuchjob00000000000000/trials")
    assert missing.status_code == 404
    assert api.get(f"/v1/jobs?parent={plain}").json()["items"] == []


def test_a_sweep_refused_names_the_field_as_the_sweep_spells_it(api):
    bad = {**SWEEP, "parameters": {"nope.x": {"values": [1, 2]}}}
    refused = api.post("/v1/jobs", json=bad)
    assert refused.status_code == 422
    assert "parameters.nope.x" in refused.text
    wide = {**SWEEP, "parameters": {"resources.gpus": {"values": [1, 64]}}}
    api.post("/v1/clusters", json={"name": "small", "address": "http://127.0.0.1:9", "gpus": 2})
    too_big = api.post("/v1/jobs", json=wide)
    assert too_big.status_code == 422, too_big.text
    assert "parameters.resources.gpus" in too_big.text
    assert api.get("/v1/jobs").json()["items"] == []
