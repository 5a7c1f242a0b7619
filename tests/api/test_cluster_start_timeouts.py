"""Placement timeouts per cluster: a cluster registered as autoscaling (or
with its own start timeout) gives its attempts that long to have their
workers placed, and the attempt's launch carries it to both kinds of gang."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from tests.factories import insert_jobs, small_spec
from trainplane.db.base import utcnow
from trainplane.db.models import Cluster
from trainplane.runtime.start_timeout import AUTOSCALING_START_TIMEOUT, FIXED_START_TIMEOUT
from trainplane.services import attempts as svc
from trainplane.services.placement import place_queued_jobs

GPU_POOL = {
    "name": "h100",
    "address": "http://127.0.0.1:8265",
    "accelerator": "H100",
    "gpus": 16,
    "gpus_per_node": 8,
}


def _claimed_start_timeout(api, session, cluster: dict) -> float:
    """Register ``cluster`` (as it is, ready), place a job there and claim its attempt."""
    assert api.put(f"/v1/clusters/{cluster['name']}", json=cluster).status_code in (200, 201)
    with session.begin():
        session.execute(update(Cluster).values(status="READY"))
    insert_jobs(session, 1, spec=small_spec(gpus=8))
    assert len(place_queued_jobs(session, utcnow()).placed) == 1
    (work,) = svc.claim_attempts(session, utcnow(), lease_seconds=30, limit=10)
    return work.start_timeout


@pytest.mark.parametrize(
    ("fields", "wait"),
    [
        ({}, FIXED_START_TIMEOUT),
        ({"autoscaling": True}, AUTOSCALING_START_TIMEOUT),
        ({"autoscaling": True, "start_timeout_seconds": 1800}, 1800),
        ({"start_timeout_seconds": 120}, 120),
    ],
)
def test_an_attempt_waits_its_clusters_start_timeout(api, session, fields, wait):
    assert _claimed_start_timeout(api, session, GPU_POOL | fields) == wait


def test_the_defaults_are_long_enough_for_a_node_to_start():
    # A GPU node scaled from zero takes minutes; Ray Train's own default is 60 s.
    assert AUTOSCALING_START_TIMEOUT >= 15 * 60
    assert FIXED_START_TIMEOUT > 60


def test_registration_says_whether_a_cluster_autoscales(api):
    created = api.post("/v1/clusters", json=GPU_POOL | {"autoscaling": True})
    assert created.status_code == 201, created.text
    assert (created.json()["autoscaling"], created.json()["start_timeout_seconds"]) == (True, None)
    (listed,) = api.get("/v1/clusters").json()["items"]
    assert listed["autoscaling"] is True
    changed = api.put("/v1/clusters/h100", json=GPU_POOL | {"start_timeout_seconds": 600})
    assert changed.status_code == 200, changed.text
    assert (changed.json()["autoscaling"], changed.json()["start_timeout_seconds"]) == (False, 600)


@pytest.mark.parametrize("bad", [0, -5, 10**9, "soon"])
def test_a_bad_start_timeout_is_422_naming_the_field(api, bad):
    response = api.post("/v1/clusters", json=GPU_POOL | {"start_timeout_seconds": bad})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "start_timeout_seconds"
