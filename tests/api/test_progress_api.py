"""Progress reports from runtimes and the metrics read back, against the real
app and a real database. Reports authenticate with the attempt's token."""

from __future__ import annotations

import json
import time

import pytest
from sqlalchemy import update

from tests.factories import make_attempt, make_job, small_spec
from trainplane.db.base import utcnow
from trainplane.db.models import JobAttempt
from trainplane.jobs.progress import MAX_METRICS, MAX_POINTS
from trainplane.jobs.states import JobStatus
from trainplane.services.attempt_tokens import TokenKey, attempt_token


@pytest.fixture
def running(session, settings):
    """A RUNNING job with a live attempt, and that attempt's token."""
    job = make_job(session, status=JobStatus.RUNNING, spec=small_spec(gpus=1))
    attempt = make_attempt(session, job.id)
    token = attempt_token(TokenKey(settings.secret_key).get(session), attempt.id)
    return job.id, attempt.id, token


def _post(api, job_id, attempt_id, token, body=None, **kwargs):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if body is not None:
        kwargs["json"] = body
    return api.post(f"/v1/jobs/{job_id}/attempts/{attempt_id}/progress", headers=headers, **kwargs)


def _point(step, **metrics):
    return {
        "step": step,
        "time": 1_800_000_000.0 + step,
        "metrics": metrics or {"loss": 1 / (step + 1)},
    }


def test_reports_are_read_back_in_order_with_the_progress(api, running):
    job_id, attempt_id, token = running
    first = _post(
        api,
        job_id,
        attempt_id,
        token,
        {
            "step": 2,
            "total_steps": 100,
            "points": [_point(1, loss=0.9), _point(2, loss=0.8, lr=1e-3)],
        },
    )
    assert first.status_code == 200 and first.json() == {"stop": None}
    assert (
        _post(api, job_id, attempt_id, token, {"points": [_point(3, loss=0.7)]}).status_code == 200
    )

    metrics = api.get(f"/v1/jobs/{job_id}/metrics").json()
    assert metrics["job_id"] == job_id and metrics["next_cursor"] is None
    assert [(p["attempt"], p["step"], p["metrics"]) for p in metrics["points"]] == [
        (1, 1, {"loss": 0.9}),
        (1, 2, {"loss": 0.8, "lr": 1e-3}),
        (1, 3, {"loss": 0.7}),
    ]
    assert metrics["points"][0]["time"] == pytest.approx(1_800_000_001.0)
    progress = metrics["progress"]
    # Without a "step", the highest step of the points is the attempt's.
    assert (progress["attempt"], progress["step"], progress["total_steps"]) == (1, 3, 100)
    assert progress["last_progress_at"] and progress["last_heartbeat_at"]
    # The job itself shows the same progress.
    assert api.get(f"/v1/jobs/{job_id}").json()["progress"] == progress


def test_a_heartbeat_without_a_new_step_is_not_progress(api, running):
    job_id, attempt_id, token = running
    assert _post(api, job_id, attempt_id, token, {"step": 5}).status_code == 200
    before = api.get(f"/v1/jobs/{job_id}").json()["progress"]
    time.sleep(0.01)
    assert _post(api, job_id, attempt_id, token, {"step": 5}).status_code == 200
    assert _post(api, job_id, attempt_id, token, {}).status_code == 200
    after = api.get(f"/v1/jobs/{job_id}").json()["progress"]
    assert after["step"] == 5
    assert after["last_progress_at"] == before["last_progress_at"]
    assert after["last_heartbeat_at"] > before["last_heartbeat_at"]
    assert _post(api, job_id, attempt_id, token, {"step": 6}).status_code == 200
    assert (
        api.get(f"/v1/jobs/{job_id}").json()["progress"]["last_progress_at"]
        > after["last_progress_at"]
    )


def test_the_answer_asks_a_preempted_attempt_to_checkpoint_and_stop(api, running, session):
    job_id, attempt_id, token = running
    assert _post(api, job_id, attempt_id, token, {"step": 1}).json() == {"stop": None}
    with session.begin():
        session.execute(
            update(JobAttempt)
            .where(JobAttempt.id == attempt_id)
            .values(stop_reason="preempted", stop_requested_at=utcnow())
        )
    answer = _post(api, job_id, attempt_id, token, {"step": 2})
    assert answer.status_code == 200
    assert answer.json()["stop"]["reason"] == "preempted"
    assert answer.json()["stop"]["requested_at"]
    # The report itself still counts: the runtime keeps reporting until it stops.
    assert api.get(f"/v1/jobs/{job_id}").json()["progress"]["step"] == 2


def test_other_stops_are_not_asked_of_the_runtime(api, running, session):
    """A cancel or max_runtime stop is done by the cluster at once: there is
    nothing for the runtime to save first."""
    job_id, attempt_id, token = running
    with session.begin():
        session.execute(
            update(JobAttempt).where(JobAttempt.id == attempt_id).values(stop_reason="cancelled")
        )
    assert _post(api, job_id, attempt_id, token, {"step": 1}).json() == {"stop": None}


def test_a_job_whose_attempt_never_reported_has_no_progress(api, session):
    job = make_job(session, status=JobStatus.RUNNING, spec=small_spec(gpus=1))
    make_attempt(session, job.id)
    assert api.get(f"/v1/jobs/{job.id}").json()["progress"] is None
    metrics = api.get(f"/v1/jobs/{job.id}/metrics").json()
    assert metrics == {"job_id": job.id, "progress": None, "points": [], "next_cursor": None}


@pytest.mark.parametrize(
    "header",
    [None, "Bearer " + "0" * 64, "Basic dXNlcjpwYXNz", "Bearer"],
    ids=["missing", "wrong", "other-scheme", "empty"],
)
def test_a_missing_or_wrong_token_is_401_and_records_nothing(api, running, header):
    job_id, attempt_id, _ = running
    headers = {"Authorization": header} if header else {}
    response = api.post(
        f"/v1/jobs/{job_id}/attempts/{attempt_id}/progress",
        json={"step": 1, "points": [_point(1)]},
        headers=headers,
    )
    assert response.status_code == 401, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.headers["www-authenticate"] == "Bearer"
    assert api.get(f"/v1/jobs/{job_id}/metrics").json()["points"] == []


def test_another_attempts_token_is_401(api, session, running):
    job_id, attempt_id, _ = running
    other = make_attempt(session, make_job(session, status=JobStatus.RUNNING).id)
    other_token = attempt_token(TokenKey(None).get(session), other.id)
    assert _post(api, job_id, attempt_id, other_token, {"step": 1}).status_code == 401


def test_unknown_job_or_attempt_is_404(api, session, settings, running):
    job_id, attempt_id, token = running
    key = TokenKey(settings.secret_key).get(session)
    assert _post(api, "nope", attempt_id, token, {"step": 1}).status_code == 404
    assert _post(api, job_id, "nope", attempt_token(key, "nope"), {"step": 1}).status_code == 404
    # An attempt of another job, named under this job.
    other = make_attempt(session, make_job(session, status=JobStatus.RUNNING).id)
    response = _post(api, job_id, other.id, attempt_token(key, other.id), {"step": 1})
    assert response.status_code == 404
    assert response.json()["status"] == 404


@pytest.mark.parametrize("ended", ["SUCCEEDED", "FAILED", "STOPPED", "LOST"])
def test_an_ended_attempt_is_409_and_records_nothing(api, session, running, ended):
    job_id, attempt_id, token = running
    with session.begin():
        session.execute(update(JobAttempt).where(JobAttempt.id == attempt_id).values(status=ended))
    response = _post(api, job_id, attempt_id, token, {"step": 1, "points": [_point(1)]})
    assert response.status_code == 409
    assert ended in response.json()["detail"]
    metrics = api.get(f"/v1/jobs/{job_id}/metrics").json()
    assert metrics["points"] == [] and metrics["progress"] is None


def _many_metrics(count):
    return {f"m{i}": float(i) for i in range(count)}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"points": [_point(i) for i in range(MAX_POINTS + 1)]}, "points"),
        ({"points": [_point(1, **_many_metrics(MAX_METRICS + 1))]}, "points[0].metrics"),
        ({"points": [{"step": -1, "time": 1.0, "metrics": {}}]}, "points[0].step"),
        ({"step": -1}, "step"),
        ({"step": "7"}, "step"),
        ({"step": 2**31}, "step"),
        ({"total_steps": 0}, "total_steps"),
        ({"points": [{"step": 1, "time": -5, "metrics": {}}]}, "points[0].time"),
        ({"points": [{"step": 1, "time": 1.0, "metrics": {"": 1.0}}]}, "points[0].metrics"),
        ({"points": [{"step": 1, "time": 1.0, "metrics": {"x" * 129: 1.0}}]}, "points[0].metrics"),
        (
            {"points": [{"step": 1, "time": 1.0, "metrics": {"loss": "low"}}]},
            "points[0].metrics.loss",
        ),
        ({"points": [{"step": 1, "metrics": {}}]}, "points[0].time"),
        ({"step": 1, "extra": True}, "extra"),
    ],
    ids=[
        "too-many-points",
        "too-many-metrics",
        "negative-point-step",
        "negative-step",
        "string-step",
        "step-too-big",
        "zero-total",
        "negative-time",
        "empty-metric-name",
        "long-metric-name",
        "string-metric",
        "no-time",
        "unknown-field",
    ],
)
def test_bad_reports_are_422_naming_the_field(api, running, body, field):
    job_id, attempt_id, token = running
    response = _post(api, job_id, attempt_id, token, body)
    assert response.status_code == 422, response.text
    fields = [e["field"] for e in response.json()["errors"]]
    assert any(f == field or f.startswith(field + ".") for f in fields), fields
    assert api.get(f"/v1/jobs/{job_id}/metrics").json()["points"] == []


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_metrics_are_422(api, running, value):
    # Python's JSON encoder writes these; they are not numbers to store.
    job_id, attempt_id, token = running
    raw = '{"points": [{"step": 1, "time": 1.0, "metrics": {"loss": ' + value + "}}]}"
    response = api.post(
        f"/v1/jobs/{job_id}/attempts/{attempt_id}/progress",
        content=raw,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert [e["field"] for e in response.json()["errors"]] == ["points[0].metrics.loss"]


def test_a_full_report_fits_the_body_limit(api, running):
    job_id, attempt_id, token = running
    metrics = {f"train/metric_{i:02d}": 0.123456789012345 for i in range(MAX_METRICS)}
    body = {"step": MAX_POINTS, "points": [_point(i, **metrics) for i in range(MAX_POINTS)]}
    assert len(json.dumps(body)) > 1 << 20  # more than other routes accept
    assert _post(api, job_id, attempt_id, token, body).status_code == 200


def test_metrics_pages_by_cursor_each_point_once_in_order(api, running):
    job_id, attempt_id, token = running
    for start in range(0, 25, 5):
        body = {"points": [_point(step) for step in range(start, start + 5)]}
        assert _post(api, job_id, attempt_id, token, body).status_code == 200
    steps, cursor, pages = [], None, 0
    while True:
        params = {"limit": 7, **({"cursor": cursor} if cursor else {})}
        page = api.get(f"/v1/jobs/{job_id}/metrics", params=params).json()
        steps += [p["step"] for p in page["points"]]
        ids = [p["id"] for p in page["points"]]
        assert ids == sorted(ids)
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert steps == list(range(25)) and pages == 4


@pytest.mark.parametrize(
    ("params", "field"),
    [({"limit": 0}, "limit"), ({"limit": 10_001}, "limit"), ({"cursor": "abc"}, "cursor")],
)
def test_metrics_paging_parameters_are_checked(api, running, params, field):
    response = api.get(f"/v1/jobs/{running[0]}/metrics", params=params)
    assert response.status_code == 422
    assert [e["field"] for e in response.json()["errors"]] == [field]


def test_metrics_of_an_unknown_job_are_404(api):
    assert api.get("/v1/jobs/nope/metrics").status_code == 404
