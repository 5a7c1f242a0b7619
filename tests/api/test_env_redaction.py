"""``entrypoint.env`` is configuration, not secret, but viewers of a project
see only its names: in the job, the comparison, and the dashboard pages that
render them (from the API, with the visitor's token). Members and admins,
who submit the values, see them. On both databases."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from tests.factories import small_spec
from trainplane.api.app import create_app
from trainplane.jobs.environment import REDACTED

ROOT = "root-token-for-the-redaction-tests"
PLAIN = "visible-to-members-only-4b1d"


@pytest.fixture
def seen(settings):
    """The API, two jobs of alpha with env values, and a header per role."""
    secured = settings.model_copy(update={"bootstrap_token": SecretStr(ROOT)})
    with TestClient(create_app(secured)) as client:
        headers = {"root": {"Authorization": f"Bearer {ROOT}"}}
        client.post("/v1/projects", json={"name": "alpha"}, headers=headers["root"])
        for role in ("viewer", "member", "admin"):
            body = {"name": role, "project": "alpha", "role": role}
            token = client.post("/v1/tokens", json=body, headers=headers["root"]).json()["token"]
            headers[role] = {"Authorization": f"Bearer {token}"}
        ids = []
        for index, value in enumerate((PLAIN, PLAIN + "-other")):
            spec = small_spec(
                f"j{index}",
                1,
                project="alpha",
                entrypoint={"command": ["true"], "env": {"PLAIN": value, "SAME": "1"}},
            )
            job = client.post("/v1/jobs", json=spec, headers=headers["member"])
            assert job.status_code == 201, job.text
            ids.append(job.json()["id"])
        yield client, headers, ids


def test_a_viewer_sees_env_names_with_values_hidden(seen):
    client, headers, (job_id, _) = seen
    job = client.get(f"/v1/jobs/{job_id}", headers=headers["viewer"])
    assert job.status_code == 200
    assert job.json()["spec"]["entrypoint"]["env"] == {"PLAIN": REDACTED, "SAME": REDACTED}
    assert PLAIN not in job.text
    for role in ("member", "admin", "root"):
        own = client.get(f"/v1/jobs/{job_id}", headers=headers[role]).json()
        assert own["spec"]["entrypoint"]["env"] == {"PLAIN": PLAIN, "SAME": "1"}, role


def test_a_viewers_comparison_shows_no_env_value(seen):
    client, headers, ids = seen
    params = {"ids": ",".join(ids)}
    as_viewer = client.get("/v1/jobs/compare", params=params, headers=headers["viewer"])
    assert as_viewer.status_code == 200 and PLAIN not in as_viewer.text
    fields = [d["field"] for d in as_viewer.json()["spec_differences"]]
    assert "entrypoint.env.PLAIN" not in fields  # both hidden: no visible difference
    as_member = client.get("/v1/jobs/compare", params=params, headers=headers["member"]).json()
    assert {d["field"]: d["values"] for d in as_member["spec_differences"]}[
        "entrypoint.env.PLAIN"
    ] == [PLAIN, PLAIN + "-other"]


def test_the_dashboard_pages_a_viewer_opens_show_no_env_value(seen):
    client, headers, ids = seen
    page = client.get(f"/jobs/{ids[0]}", headers=headers["viewer"])
    assert page.status_code == 200
    assert "PLAIN" in page.text and PLAIN not in page.text
    compare = client.get("/compare", params={"ids": ",".join(ids)}, headers=headers["viewer"])
    assert compare.status_code == 200 and PLAIN not in compare.text
    assert PLAIN in client.get(f"/jobs/{ids[0]}", headers=headers["member"]).text
