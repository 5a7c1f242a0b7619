"""``/v1/clusters``, and how registered clusters shape submissions and queues."""

from __future__ import annotations

import pytest

from tests.factories import count_rows, make_cluster, small_spec
from trainplane.db.base import utcnow
from trainplane.db.models import Cluster
from trainplane.services.placement import place_queued_jobs

LOCAL = {"name": "local", "address": "http://127.0.0.1:8265", "accelerator": "cpu", "gpus": 2}


def test_register_list_and_remove(api):
    created = api.post("/v1/clusters", json=LOCAL | {"labels": {"zone": "a"}})
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["gpus_per_node"], body["status"], body["gpus_in_use"]) == (2, "UNKNOWN", 0)
    listed = api.get("/v1/clusters").json()["items"]
    assert [c["name"] for c in listed] == ["local"] and listed[0]["labels"] == {"zone": "a"}
    assert api.delete("/v1/clusters/local").status_code == 204
    assert api.get("/v1/clusters").json()["items"] == []
    assert api.delete("/v1/clusters/local").status_code == 404


def test_duplicate_name_is_409(api):
    api.post("/v1/clusters", json=LOCAL)
    assert api.post("/v1/clusters", json=LOCAL).status_code == 409


def test_put_registers_then_updates_in_place_and_is_idempotent(api, session):
    first = api.put("/v1/clusters/local", json=LOCAL)
    assert first.status_code == 201, first.text
    cluster_id = first.json()["id"]
    with session.begin():
        # As if probed: a repeat with the same address keeps what was learned.
        session.get_one(Cluster, cluster_id).status = "READY"
    again = api.put("/v1/clusters/local", json=LOCAL)
    assert again.status_code == 200
    assert (again.json()["id"], again.json()["status"]) == (cluster_id, "READY")
    bigger = api.put("/v1/clusters/local", json=LOCAL | {"gpus": 4, "price_per_gpu_hour": 1.5})
    assert (bigger.json()["gpus"], bigger.json()["status"]) == (4, "READY")
    moved = api.put("/v1/clusters/local", json=LOCAL | {"address": "http://10.0.0.9:8265"})
    assert (moved.json()["id"], moved.json()["status"]) == (cluster_id, "UNKNOWN")
    assert [c["name"] for c in api.get("/v1/clusters").json()["items"]] == ["local"]
    actions = [e["action"] for e in api.get("/v1/audit").json()["items"]]
    # The unchanged repeat wrote nothing.
    assert actions.count("cluster.register") == 1 and actions.count("cluster.update") == 2


def test_put_refuses_a_body_for_another_name_or_an_invalid_one(api):
    other = api.put("/v1/clusters/local", json=LOCAL | {"name": "other"})
    assert other.status_code == 422 and other.json()["errors"][0]["field"] == "name"
    bad = api.put("/v1/clusters/local", json=LOCAL | {"gpus": 0})
    assert bad.status_code == 422 and "gpus" in bad.text
    assert api.get("/v1/clusters").json()["items"] == []


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"address": "127.0.0.1:8265"}, "address"),
        ({"gpus": 0}, "gpus"),
        ({"gpus": 6, "gpus_per_node": 4}, "body"),
        ({"name": "Bad Name"}, "name"),
        ({"accelerator": "h 100"}, "accelerator"),
        ({"price_per_gpu_hour": -1}, "price_per_gpu_hour"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_invalid_cluster_is_422(api, change, field):
    response = api.post("/v1/clusters", json=LOCAL | change)
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == field


def test_remove_is_refused_while_attempts_run_there(api, session):
    make_cluster(session, "busy", gpus=2)
    api.post("/v1/jobs", json=small_spec(gpus=2))
    assert len(place_queued_jobs(session, utcnow()).placed) == 1
    response = api.delete("/v1/clusters/busy")
    assert response.status_code == 409 and "1 attempt" in response.json()["detail"]
    assert api.get("/v1/clusters").json()["items"][0]["gpus_in_use"] == 2


def test_a_job_no_cluster_can_ever_hold_is_422_and_not_stored(api, session):
    make_cluster(session, "local", gpus=2)
    too_big = api.post("/v1/jobs", json=small_spec(gpus=3))
    assert too_big.status_code == 422
    problem = too_big.json()
    assert problem["errors"][0]["field"] == "resources.gpus"
    assert "local has 2 cpu" in problem["detail"]
    wrong_type = api.post(
        "/v1/jobs", json=small_spec(gpus=1, resources={"gpus": 1, "gpu_type": "H100"})
    )
    assert wrong_type.status_code == 422
    assert wrong_type.json()["errors"][0]["field"] == "resources.gpu_type"
    assert count_rows(session) == (0, 0)


def test_queued_jobs_say_where_they_stand(api, session):
    make_cluster(session, "local", gpus=2)
    running = api.post("/v1/jobs", json=small_spec("first", gpus=2)).json()
    place_queued_jobs(session, utcnow())
    second = api.post("/v1/jobs", json=small_spec("second", gpus=2)).json()
    third = api.post("/v1/jobs", json=small_spec("third", gpus=1)).json()

    shown = api.get(f"/v1/jobs/{second['id']}").json()
    assert shown["queue_position"] == 1
    assert shown["reason"] == "waiting for 2 GPUs: cluster local has 0 free"
    assert api.get(f"/v1/jobs/{third['id']}").json()["queue_position"] == 2
    started = api.get(f"/v1/jobs/{running['id']}").json()
    assert started["queue_position"] is None and started["status"] == "STARTING"
    assert started["attempts"][0]["cluster"] == "local"
    listed = {j["id"]: j for j in api.get("/v1/jobs").json()["items"]}
    assert listed[second["id"]]["queue_position"] == 1
    assert listed[third["id"]]["reason"].startswith("waiting for 1 GPU")


def test_a_cluster_registered_elsewhere_is_seen_at_once(api, session):
    make_cluster(session, "small", gpus=2)
    assert api.post("/v1/jobs", json=small_spec(gpus=4)).status_code == 422
    # Another replica registers a bigger cluster: this server's cached view of
    # capacity is now stale, but a refusal is always re-checked.
    make_cluster(session, "big", gpus=4)
    assert api.post("/v1/jobs", json=small_spec(gpus=4)).status_code == 201


def test_clusters_show_the_queued_demand_they_could_run(api, session):
    api.post("/v1/projects", json={"name": "default"})
    api.post("/v1/clusters", json=LOCAL | {"name": "small", "gpus": 2})
    api.post("/v1/clusters", json=LOCAL | {"name": "big", "gpus": 8})
    for gpus in (1, 2, 4, 4):
        assert api.post("/v1/jobs", json=small_spec(gpus=gpus)).status_code == 201
    listed = api.get("/v1/clusters").json()
    demand = {c["name"]: (c["queued_jobs"], c["queued_gpus"]) for c in listed["items"]}
    # Nothing was placed (no scheduler runs here): every job waits.
    assert demand == {"small": (2, 3), "big": (4, 11)}
    assert (listed["queued_jobs"], listed["queued_gpus"]) == (4, 11)
