"""``/metrics`` scraped from the real app: every figure read from the job store
is checked against the store itself, by a query of the test's own; the
process's histograms count what this process did."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tests.factories import insert_jobs, make_attempt, make_cluster, make_project, small_spec
from trainplane.api.app import create_app
from trainplane.config import Settings
from trainplane.db.base import utcnow
from trainplane.db.engine import make_engine, session_factory
from trainplane.db.models import Cluster, Job, JobAttempt, Project
from trainplane.jobs.states import LIVE_ATTEMPT_STATUSES, JobStatus
from trainplane.scheduler.loop import Scheduler

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(api: TestClient) -> Samples:
    answer = api.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def series(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {dict(key)[label]: v for (n, key), v in samples.items() if n == name}


def test_job_queue_and_cluster_figures_match_the_database(
    api: TestClient, session: Session
) -> None:
    vision, speech = make_project(session, "vision"), make_project(session, "speech")
    big = make_cluster(session, "big", gpus=8)
    make_cluster(session, "down", gpus=4, status="UNREACHABLE")
    long_ago = utcnow() - timedelta(hours=2)
    insert_jobs(session, 3, project_id=vision.id, created_at=long_ago)
    insert_jobs(session, 2, project_id=speech.id)
    insert_jobs(session, 4, project_id=speech.id, status=JobStatus.SUCCEEDED)
    insert_jobs(session, 1, project_id=vision.id, status=JobStatus.FAILED)
    running = insert_jobs(session, 2, project_id=vision.id, status=JobStatus.RUNNING)
    for job_id in running:
        make_attempt(session, job_id, cluster_id=big.id)
    # An ended attempt holds no GPU.
    make_attempt(session, running[0], number=0, status="FAILED", cluster_id=big.id)

    samples = scrape(api)

    with session.begin():
        by_status = dict(
            session.execute(select(Job.status, func.count()).group_by(Job.status)).all()
        )
        queued = dict(
            session.execute(
                select(Project.name, func.count())
                .join(Job, Job.project_id == Project.id)
                .where(Job.status == "QUEUED")
                .group_by(Project.name)
            ).all()
        )
        oldest = session.scalar(select(func.min(Job.created_at)).where(Job.status == "QUEUED"))
        live = [s.value for s in LIVE_ATTEMPT_STATUSES]
        in_use = dict(
            session.execute(
                select(Cluster.name, func.coalesce(func.sum(Job.gpus), 0))
                .select_from(Cluster)
                .outerjoin(
                    JobAttempt,
                    (JobAttempt.cluster_id == Cluster.id) & JobAttempt.status.in_(live),
                )
                .outerjoin(Job, Job.id == JobAttempt.job_id)
                .group_by(Cluster.name)
            ).all()
        )
    assert series(samples, "trainplane_jobs", "status") == {
        status.value: by_status.get(status.value, 0) for status in JobStatus
    }
    assert by_status["QUEUED"] == 5 and by_status["RUNNING"] == 2  # the figures are not all 0
    assert (
        series(samples, "trainplane_queued_jobs", "project")
        == queued
        == {
            "vision": 3,
            "speech": 2,
        }
    )
    waited = (utcnow() - oldest).total_seconds()
    assert value(samples, "trainplane_queue_oldest_wait_seconds") == pytest.approx(waited, abs=5)
    assert (
        series(samples, "trainplane_gpus_in_use", "cluster") == in_use == {"big": 8, "down": 0}
    )  # 2 x 4
    assert series(samples, "trainplane_gpus_total", "cluster") == {"big": 8, "down": 4}
    assert series(samples, "trainplane_cluster_up", "cluster") == {"big": 1, "down": 0}
    assert value(samples, "trainplane_database_up") == 1
    # The API's own view of the clusters agrees.
    clusters = api.get("/v1/clusters").json()["items"]
    assert {c["name"]: c["gpus_in_use"] for c in clusters} == in_use


def test_requests_are_timed_by_route_template_not_by_path(api: TestClient) -> None:
    def count() -> float:
        labels = {"method": "GET", "route": "/v1/jobs/{job_id}", "status": "404"}
        return scrape(api).get(
            ("trainplane_http_request_duration_seconds_count", frozenset(labels.items())), 0
        )

    before = count()
    for job_id in ("01JX0000000000000000000001", "01JX0000000000000000000002", "nope"):
        assert api.get(f"/v1/jobs/{job_id}").status_code == 404
    assert count() == before + 3
    routes = series(scrape(api), "trainplane_http_request_duration_seconds_count", "route")
    assert not [route for route in routes if "01JX" in route or "nope" in route]


def test_an_unreachable_database_is_reported_not_an_error(tmp_path) -> None:
    settings = Settings(
        home=tmp_path,
        database_url="postgresql+psycopg://nobody@127.0.0.1:9/none",
        auto_migrate=False,
    )
    with TestClient(create_app(settings)) as api:
        samples = scrape(api)
    assert value(samples, "trainplane_database_up") == 0
    assert ("trainplane_jobs", frozenset({("status", "QUEUED")})) not in samples


def test_with_a_metrics_token_a_scraper_must_send_it(tmp_path) -> None:
    token = "scrape-" + "k" * 24
    settings = Settings(home=tmp_path, metrics_token=token, bootstrap_token="admin-" + "a" * 24)
    with TestClient(create_app(settings)) as api:
        missing = api.get("/metrics")
        wrong = api.get("/metrics", headers={"Authorization": "Bearer " + "x" * 30})
        right = api.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        # It opens /metrics only: it is no API token.
        elsewhere = api.get("/v1/jobs", headers={"Authorization": f"Bearer {token}"})
    for refused in (missing, wrong):
        assert refused.status_code == 401
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert "TRAINPLANE_METRICS_TOKEN" in refused.json()["detail"]
    assert right.status_code == 200 and "trainplane_database_up" in right.text
    assert elsewhere.status_code == 401


@pytest.mark.parametrize("weak", ["changeme", "short"])
def test_a_weak_metrics_token_is_refused_at_start(tmp_path, weak: str) -> None:
    with pytest.raises(ValueError, match="TRAINPLANE_METRICS_TOKEN must be at least"):
        Settings(home=tmp_path, metrics_token=weak)


def test_a_scheduler_pass_records_its_steps_and_the_queue_wait(
    api: TestClient, settings: Settings, session: Session
) -> None:
    cluster = make_cluster(session, "ready", gpus=2)
    with session.begin():
        # Probed just now: this pass places on it without probing it first.
        session.get_one(Cluster, cluster.id).checked_at = utcnow()
    waited = 90.0
    submitted = utcnow() - timedelta(seconds=waited)
    insert_jobs(session, 1, spec=small_spec("waited", gpus=1), created_at=submitted)
    before = scrape(api)
    engine = make_engine(settings.resolved_database_url)
    scheduler = Scheduler(settings, session_factory(engine))
    try:
        scheduler.run_once()
    finally:
        scheduler.pool.shutdown()
        engine.dispose()
    after = scrape(api)

    def grew(name: str, **labels: str) -> float:
        key = (name, frozenset(labels.items()))
        return after.get(key, 0) - before.get(key, 0)

    for step in ("housekeeping", "placement", "advance"):
        assert grew("trainplane_scheduler_pass_seconds_count", step=step) == 1, step
    assert grew("trainplane_queue_wait_seconds_count") == 1
    assert grew("trainplane_queue_wait_seconds_sum") == pytest.approx(waited, abs=10)


def test_the_server_serves_exactly_what_the_grafana_dashboard_reads(api: TestClient) -> None:
    from tests.deploy.test_grafana import METRICS

    families = {
        family.name: family for family in text_string_to_metric_families(api.get("/metrics").text)
    }
    assert families.keys() == METRICS.keys()
    for name, labels in METRICS.items():
        declared = {
            key for sample in families[name].samples for key in sample.labels if key != "le"
        }
        # Label sets may be empty (nothing measured yet) but never other labels.
        assert declared <= labels, (name, declared)
