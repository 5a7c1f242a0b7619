"""A sweep's GPU time and cost are its trials': on the sweep's job record (the
sweep has no attempts of its own), and in ``GET /v1/usage`` by experiment,
where the trials count under the experiment they inherit and nothing twice."""

from __future__ import annotations

import pytest

from tests.factories import make_cluster
from tests.sweep_rows import add_trial, insert_sweep, set_sweep_status, sweep_spec
from trainplane.db.base import utcnow
from trainplane.jobs.states import JobStatus
from trainplane.services.usage import job_usage


def test_a_sweep_costs_the_sum_of_its_trials_counted_once_by_experiment(api, session):
    cluster = make_cluster(session, gpus=8, price_per_gpu_hour=2.0)
    spec = sweep_spec()
    spec["trial"]["tracking"] = {"experiment": "lr-study"}
    sweep_id = insert_sweep(session, spec)
    set_sweep_status(session, sweep_id, JobStatus.RUNNING)
    # 2 GPUs each: 30 min (1 GPU-hour) and 15 min (0.5 GPU-hour), at 2.00.
    first = add_trial(
        session,
        sweep_id,
        1,
        {"entrypoint.args.lr": 0.01, "entrypoint.args.global_batch": 32},
        status=JobStatus.SUCCEEDED,
        losses=[1.0, 0.5],
        cluster_id=cluster.id,
        minutes=30,
    )
    second = add_trial(
        session,
        sweep_id,
        2,
        {"entrypoint.args.lr": 0.5, "entrypoint.args.global_batch": 64},
        status=JobStatus.CANCELLED,
        losses=[3.0],
        cluster_id=cluster.id,
        minutes=15,
        pruned="pruned at rung 0 (step 10)",
    )

    with session.begin():
        usage = job_usage(session, [sweep_id, first], utcnow())
    assert usage[sweep_id].gpu_hours == pytest.approx(1.5)
    assert usage[sweep_id].cost == pytest.approx(3.0)
    assert usage[first].gpu_hours == pytest.approx(1.0)  # a trial alone is its own

    sweep = api.get(f"/v1/jobs/{sweep_id}").json()
    assert sweep["gpu_hours"] == pytest.approx(1.5) and sweep["cost"] == pytest.approx(3.0)
    listed = {j["id"]: j for j in api.get("/v1/jobs", params={"limit": 10}).json()["items"]}
    assert listed[sweep_id]["cost"] == pytest.approx(3.0)
    assert listed[second]["cost"] == pytest.approx(1.0)

    report = api.get("/v1/usage").json()
    assert report["total"]["gpu_hours"] == pytest.approx(1.5)  # not 3.0: the sweep adds none
    experiments = {(e["project"], e["experiment"]): e for e in report["by_experiment"]}
    study = experiments[("default", "lr-study")]
    assert study["gpu_hours"] == pytest.approx(1.5) and study["jobs"] == 2
    assert set(experiments) == {("default", "lr-study")}
