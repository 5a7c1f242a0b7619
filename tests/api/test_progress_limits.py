"""The progress endpoint is written to by the job's own code, so it is
bounded: a burst of reports per attempt then a steady rate (429 with
Retry-After beyond), and a cap on the distinct metric names a report and an
attempt may have (422 on ``metrics``, nothing of the report kept). Real app
and database (SQLite and PostgreSQL)."""

from __future__ import annotations

import time

import pytest

from tests.api.test_progress_api import _point, _post, running  # noqa: F401  (fixture)
from tests.factories import make_attempt, make_job, small_spec
from trainplane.db.models import JobAttempt
from trainplane.jobs.progress import MAX_METRICS
from trainplane.jobs.states import JobStatus
from trainplane.services.attempt_tokens import TokenKey, attempt_token
from trainplane.services.progress import MAX_METRIC_KEYS, PROGRESS_BURST, PROGRESS_PER_SECOND


def _points_with_names(names: list[str], first_step: int = 1) -> list[dict]:
    """Points carrying ``names``, at most MAX_METRICS per point, as a report may."""
    chunks = [names[i : i + MAX_METRICS] for i in range(0, len(names), MAX_METRICS)]
    return [
        _point(first_step + i, **{name: 1.0 for name in chunk}) for i, chunk in enumerate(chunks)
    ]


def _latest_names(session, attempt_id: str) -> set[str]:
    with session.begin():
        attempt = session.get(JobAttempt, attempt_id, populate_existing=True)
        return set(attempt.latest_metrics or {})


def test_past_a_burst_reports_are_429_with_retry_after_then_accepted_again(
    api,
    session,
    settings,
    running,  # noqa: F811
):
    job_id, attempt_id, token = running
    started = time.monotonic()
    accepted = 0
    refused = None
    for step in range(PROGRESS_BURST * 3):
        answer = _post(api, job_id, attempt_id, token, {"step": step})
        if answer.status_code == 429:
            refused = answer
            break
        assert answer.status_code == 200, answer.text
        accepted += 1
    elapsed = time.monotonic() - started
    assert refused is not None, "never limited"
    # The burst, plus what refilled while it was sent.
    assert PROGRESS_BURST <= accepted <= PROGRESS_BURST + elapsed * PROGRESS_PER_SECOND + 1
    wait = int(refused.headers["retry-after"])
    assert 1 <= wait <= 2 and "send again" in refused.json()["detail"]
    # A refused report records nothing, not even its step.
    assert api.get(f"/v1/jobs/{job_id}").json()["progress"]["step"] == accepted - 1

    # Another attempt has its own allowance.
    other = make_attempt(session, make_job(session, status=JobStatus.RUNNING, spec=small_spec()).id)
    other_token = attempt_token(TokenKey(settings.secret_key).get(session), other.id)
    assert _post(api, other.job_id, other.id, other_token, {"step": 1}).status_code == 200

    time.sleep(wait)
    assert _post(api, job_id, attempt_id, token, {"step": 999}).status_code == 200


def test_a_report_with_too_many_metric_names_is_refused_whole(api, session, running):  # noqa: F811
    job_id, attempt_id, token = running
    names = [f"m{i}" for i in range(MAX_METRIC_KEYS + 1)]
    answer = _post(api, job_id, attempt_id, token, {"points": _points_with_names(names)})
    assert answer.status_code == 422, answer.text
    error = answer.json()["errors"][0]
    assert error["field"] == "metrics" and f"at most {MAX_METRIC_KEYS}" in error["message"]
    assert api.get(f"/v1/jobs/{job_id}/metrics").json()["points"] == []
    assert _latest_names(session, attempt_id) == set()


def test_an_attempts_metric_names_are_capped_across_reports(api, session, running):  # noqa: F811
    job_id, attempt_id, token = running
    first = [f"a{i}" for i in range(MAX_METRIC_KEYS - 1)]
    assert _post(api, job_id, attempt_id, token, {"points": _points_with_names(first)}).is_success
    last = {"points": [_point(10, a0=0.5, last=1.0)]}  # one new name: exactly at the cap
    assert _post(api, job_id, attempt_id, token, last).status_code == 200

    over = {"points": [_point(11, a0=0.25, one_too_many=1.0)]}
    answer = _post(api, job_id, attempt_id, token, over)
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == "metrics"
    # Nothing of the refused report was kept: not its new name, nor its values.
    assert _latest_names(session, attempt_id) == {*first, "last"}
    steps = [p["step"] for p in api.get(f"/v1/jobs/{job_id}/metrics").json()["points"]]
    assert 11 not in steps

    # Names it already has are fine: the run goes on reporting them.
    again = {"step": 12, "points": [_point(12, a0=0.125, last=2.0)]}
    assert _post(api, job_id, attempt_id, token, again).status_code == 200
    assert len(_latest_names(session, attempt_id)) == MAX_METRIC_KEYS


@pytest.mark.parametrize("length", [129, 10_000])
def test_a_metric_name_over_128_characters_is_refused(api, running, length):  # noqa: F811
    job_id, attempt_id, token = running
    answer = _post(api, job_id, attempt_id, token, {"points": [_point(1, **{"x" * length: 1.0})]})
    assert answer.status_code == 422
    assert answer.json()["errors"][0]["field"].startswith("points[0].metrics")
