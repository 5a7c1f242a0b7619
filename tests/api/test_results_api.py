"""Function results over the real app and database: reported with the
attempt's token, read back by users, and the rules of which report stands."""

from __future__ import annotations

import base64
import pickle

import pytest

from tests.factories import make_attempt, make_job, small_spec
from trainplane.jobs.results import MAX_RESULT_BYTES
from trainplane.jobs.states import JobStatus
from trainplane.services.attempt_tokens import TokenKey, attempt_token


@pytest.fixture
def running(session, settings):
    job = make_job(session, status=JobStatus.RUNNING, spec=small_spec(gpus=1))
    attempt = make_attempt(session, job.id)
    token = attempt_token(TokenKey(settings.secret_key).get(session), attempt.id)
    return job.id, attempt.id, token


def _put(api, job_id, attempt_id, token, body):
    return api.put(
        f"/v1/jobs/{job_id}/attempts/{attempt_id}/result",
        json=body,
        headers={"Authorization": f"Bearer {token}"} if token else {},
    )


def _returned(value, rank=0):
    data = base64.b64encode(pickle.dumps(value)).decode()
    return {"outcome": "returned", "rank": rank, "value": data, "value_repr": repr(value)}


def _raised(rank, message):
    return {
        "outcome": "raised",
        "rank": rank,
        "error": {"type": "ValueError", "message": message, "traceback": f"Traceback\n{message}"},
    }


def test_a_return_value_is_read_back(api, running):
    job_id, attempt_id, token = running
    assert api.get(f"/v1/jobs/{job_id}/result").status_code == 404
    answer = _put(api, job_id, attempt_id, token, _returned({"loss": 0.25}))
    assert answer.status_code == 200 and answer.json() == {"recorded": True}
    result = api.get(f"/v1/jobs/{job_id}/result").json()
    assert (result["outcome"], result["rank"], result["attempt"]) == ("returned", 0, 1)
    assert pickle.loads(base64.b64decode(result["value"])) == {"loss": 0.25}
    assert result["value_repr"] == "{'loss': 0.25}" and result["error"] is None
    assert result["value_bytes"] == len(pickle.dumps({"loss": 0.25}))


def test_the_first_exception_stands_and_a_later_return_replaces_it(api, running):
    job_id, attempt_id, token = running
    assert _put(api, job_id, attempt_id, token, _raised(1, "first")).json() == {"recorded": True}
    assert _put(api, job_id, attempt_id, token, _raised(0, "second")).json() == {"recorded": False}
    result = api.get(f"/v1/jobs/{job_id}/result").json()
    assert result["outcome"] == "raised" and result["rank"] == 1
    assert result["error"]["message"] == "first" and result["value"] is None
    # The workers restarted in place and finished: the return is the result.
    assert _put(api, job_id, attempt_id, token, _returned(7)).json() == {"recorded": True}
    assert api.get(f"/v1/jobs/{job_id}/result").json()["outcome"] == "returned"


def test_the_latest_attempt_with_a_result_is_the_jobs(api, session, settings, running):
    job_id, first_attempt, token = running
    _put(api, job_id, first_attempt, token, _raised(0, "attempt one"))
    second = make_attempt(session, job_id, number=2)
    second_token = attempt_token(TokenKey(settings.secret_key).get(session), second.id)
    # Until the second attempt reports, the first one's result is the latest.
    assert api.get(f"/v1/jobs/{job_id}/result").json()["attempt"] == 1
    _put(api, job_id, second.id, second_token, _returned("done"))
    result = api.get(f"/v1/jobs/{job_id}/result").json()
    assert (result["attempt"], result["attempt_id"]) == (2, second.id)


def test_only_the_attempts_own_token_while_it_is_live(api, session, settings, running):
    job_id, attempt_id, _ = running
    assert _put(api, job_id, attempt_id, None, _returned(1)).status_code == 401
    assert _put(api, job_id, attempt_id, "0" * 64, _returned(1)).status_code == 401
    ended = make_attempt(session, job_id, number=2, status="FAILED")
    ended_token = attempt_token(TokenKey(settings.secret_key).get(session), ended.id)
    late = _put(api, job_id, ended.id, ended_token, _returned(1))
    assert late.status_code == 409 and "ended" in late.json()["detail"]
    assert api.get(f"/v1/jobs/{job_id}/result").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"outcome": "returned", "rank": 0}, "body"),
        ({"outcome": "returned", "rank": 0, "value": "not base64!"}, "value"),
        ({"outcome": "kept", "rank": 0, "value": ""}, "outcome"),
        ({**_raised(0, "x"), "value": "AA=="}, "body"),
        ({**_returned(1), "rank": -1}, "rank"),
    ],
)
def test_malformed_reports_are_422_naming_the_field(api, running, body, field):
    job_id, attempt_id, token = running
    answer = _put(api, job_id, attempt_id, token, body)
    assert answer.status_code == 422
    assert field in {e["field"] for e in answer.json()["errors"]} or field in answer.text


def test_a_value_over_the_limit_is_refused(api, running):
    job_id, attempt_id, token = running
    body = {
        "outcome": "returned",
        "rank": 0,
        "value": base64.b64encode(b"x" * (MAX_RESULT_BYTES + 1)).decode(),
    }
    answer = _put(api, job_id, attempt_id, token, body)
    assert answer.status_code == 422 and "limit" in answer.text
    assert api.get(f"/v1/jobs/{job_id}/result").status_code == 404
