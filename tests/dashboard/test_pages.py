"""The dashboard's pages as HTML, on SQLite and PostgreSQL: what each shows,
how it fails, and that it learns everything from the public API."""

from __future__ import annotations

import ast
import re
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from tests.factories import insert_jobs, make_attempt, make_cluster, small_spec
from trainplane.db.base import utcnow
from trainplane.db.models import Job, JobAttempt
from trainplane.jobs.states import JobStatus

DASHBOARD = Path(__file__).resolve().parents[2] / "src" / "trainplane" / "dashboard"
PAGES = ["/", "/clusters", "/usage", "/compare", "/submit"]


def submit(api, name="j", gpus=1, **spec):
    created = api.post("/v1/jobs", json=small_spec(name=name, gpus=gpus, **spec))
    assert created.status_code == 201, created.text
    return created.json()


def html_of(response):
    assert response.status_code == 200, response.text[:500]
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["cache-control"] == "no-store"
    assert re.match(r"render;dur=\d+(\.\d+)?$", response.headers["server-timing"])
    return response.text


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders_on_an_empty_install(api, path):
    page = html_of(api.get(path))
    assert page.startswith("<!doctype html>") and "</html>" in page
    # Served from this server: no CDN, no other origin.
    assert not re.search(r"""(src|href)=["']https?://""", page)


def test_the_jobs_page_lists_jobs_with_status_reason_and_queue_position(api, session):
    make_cluster(session, gpus=2)
    first, second = submit(api, "first", gpus=2), submit(api, "second", gpus=2)
    page = html_of(api.get("/"))
    for job in (first, second):
        assert f'<tr data-job-id="{job["id"]}" data-status="QUEUED">' in page
    assert page.index(second["id"]) < page.index(first["id"])  # newest first
    assert '<span class="position" title="Place in the queue">#2</span>' in page
    assert "#1" in page


def test_the_jobs_page_filters_and_pages(api, session):
    insert_jobs(session, 55, status=JobStatus.SUCCEEDED)
    submit(api, "odd-one")
    page = html_of(api.get("/", params={"status": "QUEUED"}))
    assert page.count("<tr data-job-id=") == 1 and "odd-one" in page
    full = html_of(api.get("/"))
    assert full.count("<tr data-job-id=") == 50
    older = re.search(r'<a rel="next" href="\?([^"]+)"', full)
    assert older, "no link to the next page"
    rest = html_of(api.get("/?" + older.group(1).replace("&amp;", "&")))
    assert rest.count("<tr data-job-id=") == 6
    # An unknown status is no filter rather than an error page.
    assert html_of(api.get("/", params={"status": "BOGUS"})).count("<tr data-job-id=") == 50


def test_the_rows_fragment_is_the_table_body_of_the_page(api):
    job = submit(api, "fragmented")
    rows = html_of(api.get("/fragments/jobs"))
    assert rows.startswith('<tbody data-part="job-rows">') and job["id"] in rows
    assert "<html" not in rows


def test_text_from_jobs_is_escaped(api, session):
    job = submit(api, "escaped")
    with session.begin():
        session.execute(
            update(Job)
            .where(Job.id == job["id"])
            .values(status="FAILED", reason="<script>alert(1)</script>")
        )
    for path in ("/", f"/jobs/{job['id']}"):
        page = html_of(api.get(path))
        assert "<script>alert(1)</script>" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def ran(session, job_id, cluster_id, start, duration, *, number=1):
    """An attempt of the job that ran on the cluster from ``start`` for ``duration``."""
    attempt = make_attempt(
        session, job_id, number=number, status="SUCCEEDED", cluster_id=cluster_id
    )
    with session.begin():
        session.execute(
            update(JobAttempt)
            .where(JobAttempt.id == attempt.id)
            .values(started_at=start, finished_at=start + duration)
        )


def test_the_job_page_shows_spec_timeline_attempts_and_cost(api, session):
    cluster = make_cluster(session, gpus=4, price_per_gpu_hour=3.0)
    job = submit(api, "detailed", gpus=2, tracking={"experiment": "exp-a"})
    ran(session, job["id"], cluster.id, utcnow() - timedelta(hours=2), timedelta(hours=1))
    page = html_of(api.get(f"/jobs/{job['id']}"))
    assert "<h1>detailed" in page
    assert "data-cost>$6.00<" in page  # 2 GPUs x 1 h x 3.00
    assert "submitted by local" in page  # the first event
    assert "experiment: exp-a" in page  # the spec, as YAML
    assert 'data-action="cancel"' in page  # not ended yet
    panels = html_of(api.get(f"/fragments/jobs/{job['id']}"))
    assert 'data-part="job-summary"' in panels and 'data-part="job-history"' in panels


def test_the_job_page_says_how_auto_chose_and_what_restarts_cost(api, session):
    cluster = make_cluster(session, "h100", gpus=8, accelerator="H100", gpu_memory_gb=80)
    job = submit(
        api,
        "auto-picked",
        gpus=8,
        strategy={"type": "auto"},
        model={"parameters": 1.3e10},
        precision="bf16",
    )
    for number in (1, 2):
        start = utcnow() - timedelta(hours=3 - number)
        ran(session, job["id"], cluster.id, start, timedelta(minutes=30), number=number)
    page = html_of(api.get(f"/jobs/{job['id']}"))
    assert "8 \u00d7 fsdp" in page
    reason = re.search(r'data-strategy-reason title="([^"]+)"', page)
    assert reason and "picked fsdp" in reason.group(1)
    # The first attempt (30 min on 8 GPUs) was replaced by the second.
    assert "data-lost>4.00<" in page


def test_a_missing_job_is_a_404_page(api):
    response = api.get("/jobs/no-such-job")
    assert response.status_code == 404
    assert "no job with id &#39;no-such-job&#39;" in response.text
    assert api.get("/fragments/jobs/no-such-job").status_code == 404


def test_an_ended_job_has_no_cancel_button(api):
    job = submit(api, "ended")
    assert api.post(f"/v1/jobs/{job['id']}/cancel").status_code == 200
    page = html_of(api.get(f"/jobs/{job['id']}"))
    assert 'data-action="cancel"' not in page and 'data-status="CANCELLED"' in page


def test_the_clusters_page_shows_capacity_and_queued_demand(api, session):
    make_cluster(session, "gpu-a", gpus=8, accelerator="H100", price_per_gpu_hour=2.5)
    submit(api, "waiting", gpus=4, resources={"gpus": 4, "gpu_type": "H100"})
    page = html_of(api.get("/clusters"))
    assert 'data-cluster="gpu-a"' in page
    assert "0 of 8 H100" in page and "1 jobs, 4 GPUs" in page and "$2.50 / GPU-hour" in page
    assert "1 queued job asking for 4 GPUs in all" in page


def test_the_usage_page_totals_the_window(api, session):
    cluster = make_cluster(session, gpus=4, price_per_gpu_hour=2.0)
    job = submit(api, "used", gpus=4)
    attempt = make_attempt(session, job["id"], status="SUCCEEDED", cluster_id=cluster.id)
    start = utcnow() - timedelta(days=2)
    with session.begin():
        session.execute(
            update(JobAttempt)
            .where(JobAttempt.id == attempt.id)
            .values(started_at=start, finished_at=start + timedelta(minutes=30))
        )
    page = html_of(api.get("/usage", params={"days": 7}))
    assert "data-total-hours>2.00<" in page and "data-total-cost>$4.00<" in page
    # The chart's data: every day of the window, in the page for the script.
    assert page.count('"day":') == 8
    # An unknown window falls back to 30 days rather than failing.
    assert html_of(api.get("/usage", params={"days": 5})).count('"day":') == 31


def test_compare_with_fewer_than_two_jobs_explains_beside_the_picker(api):
    job = submit(api, "alone")
    page = html_of(api.get("/compare", params={"ids": job["id"]}))
    assert "give 2 to 20 job ids" in page and 'name="pick"' in page
    assert 'data-chart="overlay"' not in page


def test_compare_lists_the_spec_fields_that_differ(api):
    a = submit(api, "a", gpus=1)
    b = submit(api, "b", gpus=2)
    page = html_of(api.get("/compare", params={"ids": f"{a['id']},{b['id']}"}))
    assert 'data-chart="overlay"' in page
    assert "<code>resources.gpus</code>" in page and "<code>name</code>" in page
    # Without scripts the picker sends its checkboxes; the page takes them too.
    picked = html_of(api.get("/compare", params={"ids": "", "pick": [a["id"], b["id"]]}))
    assert "<code>resources.gpus</code>" in picked


def test_static_files_are_served_with_a_content_version(api):
    page = html_of(api.get("/"))
    links = re.findall(r'(?:src|href)="(/static/[^"]+)"', page)
    assert {link.split("?")[0] for link in links} == {
        "/static/dashboard.css",
        "/static/charts.js",
        "/static/app.js",
    }
    assert all(re.search(r"\?v=[0-9a-f]{12}$", link) for link in links)
    for link in links:
        assert api.get(link).status_code == 200
    assert api.get("/static/nope.js").status_code == 404


def test_pages_stay_out_of_the_openapi_document(api):
    paths = api.get("/openapi.json").json()["paths"]
    assert not any(p == "/" or p.startswith(("/jobs", "/fragments", "/usage")) for p in paths)


def test_the_dashboard_imports_no_server_internals():
    """It learns everything through the public API, so it can never show
    more than a client with the same token could see."""
    forbidden = (
        "trainplane.services",
        "trainplane.db",
        "trainplane.scheduler",
        "trainplane.backends",
    )
    for module in DASHBOARD.glob("*.py"):
        tree = ast.parse(module.read_text())
        for node in ast.walk(tree):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for name in names:
                assert not name.startswith(forbidden), f"{module.name} imports {name}"


BOOTSTRAP = "a-bootstrap-token-for-page-tests"


@pytest.fixture
def secured(settings):
    from fastapi.testclient import TestClient
    from pydantic import SecretStr

    from trainplane.api.app import create_app

    app = create_app(settings.model_copy(update={"bootstrap_token": SecretStr(BOOTSTRAP)}))
    with TestClient(app) as client:
        yield client


def test_without_a_token_pages_ask_for_one_and_login_signs_the_browser_in(secured):
    asked = secured.get("/")
    assert asked.status_code == 401 and "Sign in with a token" in asked.text
    signed = secured.get("/login", params={"token": BOOTSTRAP}, follow_redirects=False)
    assert signed.status_code == 303 and signed.headers["location"] == "/"
    cookie = signed.headers["set-cookie"]
    assert cookie.startswith(f"trainplane_token={BOOTSTRAP};") and "SameSite=strict" in cookie
    # The client keeps the cookie /login set, as a browser does.
    page = secured.get("/")
    assert page.status_code == 200 and "<h1>Jobs</h1>" in page.text
    secured.cookies.clear()
    wrong = secured.get("/", headers={"Cookie": "trainplane_token=tp_wrong"})
    assert wrong.status_code == 401 and "not recognised" in wrong.text


def test_a_viewer_sees_the_job_but_no_cancel_button(secured):
    root = {"Authorization": f"Bearer {BOOTSTRAP}"}
    job = secured.post("/v1/jobs", json=small_spec("watched", 1), headers=root).json()
    viewer = secured.post(
        "/v1/tokens", json={"name": "v", "project": "default", "role": "viewer"}, headers=root
    ).json()["token"]
    as_viewer = {"Authorization": f"Bearer {viewer}"}
    page = html_of(secured.get(f"/jobs/{job['id']}", headers=as_viewer))
    assert 'data-action="cancel"' not in page and "data-no-cancel" in page
    as_admin = html_of(secured.get(f"/jobs/{job['id']}", headers=root))
    assert 'data-action="cancel"' in as_admin


def _report_result(api, session, settings, job_id, body):
    from trainplane.services.attempt_tokens import TokenKey, attempt_token

    attempt = make_attempt(session, job_id)
    token = attempt_token(TokenKey(settings.secret_key).get(session), attempt.id)
    answer = api.put(
        f"/v1/jobs/{job_id}/attempts/{attempt.id}/result",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
    )
    assert answer.status_code == 200, answer.text


def test_the_job_page_shows_a_functions_result_or_its_remote_traceback(api, session, settings):
    import base64
    import pickle

    plain = submit(api, "plain")
    assert 'data-part="job-result"' in html_of(api.get(f"/jobs/{plain['id']}"))
    assert "Result</h2>" not in html_of(api.get(f"/jobs/{plain['id']}"))

    returned = submit(api, "returned")
    value = base64.b64encode(pickle.dumps({"loss": 0.5})).decode()
    _report_result(
        api,
        session,
        settings,
        returned["id"],
        {"outcome": "returned", "rank": 0, "value": value, "value_repr": "{'loss': <0.5>}"},
    )
    page = html_of(api.get(f"/jobs/{returned['id']}"))
    assert "Rank 0's function returned" in page and "{&#39;loss&#39;: &lt;0.5&gt;}" in page
    # The page asks for the repr only, never the pickled value itself.
    assert value not in page
    assert (
        api.get(f"/v1/jobs/{returned['id']}/result", params={"value": "false"}).json()["value"]
        is None
    )

    raised = submit(api, "raised")
    traceback = 'Traceback (most recent call last):\n  File "train.py", line 3\nValueError: <odd>'
    _report_result(
        api,
        session,
        settings,
        raised["id"],
        {
            "outcome": "raised",
            "rank": 1,
            "error": {"type": "ValueError", "message": "<odd>", "traceback": traceback},
        },
    )
    fragment = html_of(api.get(f"/fragments/jobs/{raised['id']}"))
    assert 'raised <span class="mono">ValueError</span> on rank 1' in fragment
    assert "ValueError: &lt;odd&gt;" in fragment and "<odd>" not in fragment
