"""The dashboard in a real browser (headless Chromium) against a real
``trainplane server`` with real jobs on a real local Ray cluster and MLflow:
one failed, one succeeded with a registered model, one running, one queued
behind it. Each page is saved as a 1280x800 screenshot for review.

The server has a token, as any shared one does: each test's browser signs
in by posting it to ``/login`` (one signs in through the form), and from then
on the pages and their scripts work with the HttpOnly cookie alone.

The tests run in file order on one shared scene: the running job is
cancelled last.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.test_training import MLP
from tests.tracking.test_tracking_runs import TrackedService, start_tracked_server
from trainplane.backends.local_ray import LocalRayHead
from trainplane.testing.clusters import register_local_cluster

pytestmark = pytest.mark.timeout(600)

PRICE = 2.5
ROOT = "a-bootstrap-token-for-the-browser"


@dataclass
class Scene:
    service: TrackedService
    failed: str
    succeeded: str
    running: str
    queued: str

    @property
    def url(self) -> str:
        return self.service.url

    def status(self, job_id: str) -> str:
        return self.service.job(job_id)["status"]

    def job_count(self) -> int:
        return len(self.service.http.get("/v1/jobs", params={"limit": 200}).json()["items"])


def mlp_job(service: TrackedService, name: str, steps: int, sleep: float, **spec: Any) -> str:
    body = {
        "kind": "train",
        "name": name,
        "entrypoint": {
            "function": "train:train_loop",
            "args": {"steps": steps, "step_sleep": sleep},
            "working_dir": str(MLP),
        },
        "resources": {"gpus": 2},
        "strategy": {"type": "ddp"},
        "checkpoint": {"every_steps": 10, "keep_last": 2},
        "tracking": {"experiment": "dashboard"},
        **spec,
    }
    answer = service.http.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def command_job(service: TrackedService, name: str, code: str, gpus: int = 1) -> str:
    body = {
        "kind": "train",
        "name": name,
        "entrypoint": {"command": ["python", "-c", code]},
        "resources": {"gpus": gpus},
        "retries": {"max_restarts": 0},
    }
    answer = service.http.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


@pytest.fixture(scope="module")
def scene(
    ray_head: LocalRayHead, s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scene]:
    home = tmp_path_factory.mktemp("dashboard")
    mlflow_uri = f"sqlite:///{home / 'mlflow.db'}"
    with start_tracked_server(
        home,
        ray_head,
        s3_endpoint,
        mlflow_uri,
        TRAINPLANE_BOOTSTRAP_TOKEN=ROOT,
        # The jobs run the example's code from this machine, as an operator allows it.
        TRAINPLANE_SERVER_PATHS=str(MLP),
    ) as server:
        register_local_cluster(
            f"sqlite:///{home / 'trainplane.db'}",
            ray_head.address,
            slots=2,
            price_per_gpu_hour=PRICE,
        )
        service = TrackedService(server.url, home, s3_endpoint, mlflow_uri)
        service.http.headers["Authorization"] = f"Bearer {ROOT}"
        failed = command_job(service, "broken", "import sys; print('about to fail'); sys.exit(3)")
        succeeded = mlp_job(
            service, "mlp-done", steps=20, sleep=0.0, register_model={"name": "dash-mlp"}
        )
        assert service.wait(failed)["status"] == "FAILED"
        service.succeeded(succeeded)
        service.tracked(succeeded)
        # Long enough to outlive every test before the cancel.
        running = mlp_job(service, "mlp-live", steps=2000, sleep=0.25)
        service.wait_for(lambda: service.job(running)["status"] == "RUNNING", "mlp-live running")
        service.wait_for(lambda: len(service.losses(running)) >= 3, "mlp-live reporting")
        queued = command_job(service, "waits", "print('never')", gpus=2)
        yield Scene(service, failed, succeeded, running, queued)


def sign_in(context: Any, url: str) -> None:
    """The browser context signs in as the sign-in form does (a POST)."""
    answer = context.request.post(f"{url}/login", form={"token": ROOT}, headers={"Origin": url})
    assert answer.ok, answer.status


@pytest.fixture
def page(page: Any, scene: Scene) -> Any:
    """The conftest's page, signed in."""
    sign_in(page.context, scene.url)
    return page


def shoot(page: Any, folder: Path, name: str) -> None:
    """The page as it opens (1280x800, from the top), and all of it."""
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(folder / f"{name}.png"))
    page.screenshot(path=str(folder / f"{name}-full.png"), full_page=True)


def row(page: Any, job_id: str) -> Any:
    return page.locator(f'tr[data-job-id="{job_id}"]')


def test_the_jobs_list_shows_each_job_with_its_status_and_reason(scene, page, screenshots):
    page.goto(scene.url + "/")
    expected = {
        scene.failed: "FAILED",
        scene.succeeded: "SUCCEEDED",
        scene.running: "RUNNING",
        scene.queued: "QUEUED",
    }
    for job_id, status in expected.items():
        assert row(page, job_id).get_attribute("data-status") == status
    queued = row(page, scene.queued).locator("td.reason").inner_text()
    assert "#1" in queued and "waiting for 2 GPUs" in queued, queued
    assert "exit" in row(page, scene.failed).locator("td.reason").inner_text().lower()
    # GPU time is priced at the cluster's rate.
    cost = row(page, scene.succeeded).locator("td.num").nth(1).inner_text()
    assert cost.startswith("$") and cost != "$0.00", cost
    shoot(page, screenshots, "jobs")


def test_signing_in_through_the_form_keeps_the_token_from_scripts(scene, browser, console):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = console.watch(context.new_page())
    page.goto(scene.url + "/jobs/" + scene.succeeded)
    assert page.locator("h1").inner_text() == "Sign in with a token"
    # What an older dashboard left behind.
    page.evaluate("localStorage.setItem('trainplane.token', 'tp_left-from-before')")

    page.fill('main [data-form="sign-in"] input[name="token"]', ROOT)
    page.click('main [data-action="sign-in"]')
    page.wait_for_url(f"**/jobs/{scene.succeeded}")  # back where it was asked

    cookies = {c["name"]: c for c in context.cookies()}
    cookie = cookies["trainplane_token"]
    assert cookie["value"] == ROOT and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert ROOT not in page.evaluate("document.cookie")
    stored = page.evaluate("JSON.stringify(Object.assign({}, localStorage))")
    assert ROOT not in stored and "trainplane.token" not in stored
    # The scripts fetch the API with the cookie alone: the chart and the log fill in.
    page.wait_for_selector('[data-metric="loss"] path.line')
    assert chart_points(page, "loss") == 20
    page.wait_for_function("() => document.querySelector('pre[data-logs]').dataset.ended")

    # Forgetting the token signs the browser out.
    page.click('header [data-action="token"]')
    page.click('#token-dialog [data-action="forget-token"]')
    page.wait_for_url("**/login")
    assert "trainplane_token" not in {c["name"] for c in context.cookies()}
    context.close()
    console.expected(401)  # the page that asked for a token answered 401, on purpose
    assert not console, console


def test_the_jobs_list_updates_itself(scene, page):
    page.goto(scene.url + "/")
    before = row(page, scene.running).locator("td").nth(6).inner_text()
    # The duration of the running job moves on without a reload.
    page.wait_for_function(
        "([id, before]) => document.querySelector(`tr[data-job-id='${id}'] td:nth-child(7)`)"
        ".innerText !== before",
        arg=[scene.running, before],
        timeout=15_000,
    )


def test_the_jobs_list_filters_by_status(scene, page):
    page.goto(scene.url + "/")
    page.select_option('select[name="status"]', "FAILED")
    page.click('form.filters button[type="submit"]')
    page.wait_for_url("**/?status=FAILED**")
    assert page.locator("tbody tr[data-job-id]").evaluate_all(
        "rows => rows.map(r => r.dataset.jobId)"
    ) == [scene.failed]


def chart_points(page: Any, metric: str) -> int:
    path = page.locator(f'[data-chart="metrics"][data-metric="{metric}"] path.line')
    return int(path.get_attribute("data-count") or 0) if path.count() else 0


def test_the_running_job_page_grows_its_loss_chart_and_follows_its_logs(scene, page, screenshots):
    page.goto(f"{scene.url}/jobs/{scene.running}")
    page.wait_for_selector('[data-metric="loss"] path.line')
    first = chart_points(page, "loss")
    assert first >= 3
    page.wait_for_function(
        "n => +document.querySelector('[data-metric=\"loss\"] path.line').dataset.count > n",
        arg=first,
        timeout=20_000,
    )
    # Axes carry labels; hovering shows the values under the pointer.
    chart = page.locator('[data-metric="loss"] .chart-body')
    assert chart.locator("text.axis-label").all_text_contents() == ["step", "loss"]
    chart.locator("rect.hover-area").hover()
    tip = chart.locator(".chart-tip")
    assert tip.is_visible() and "loss:" in tip.inner_text()

    logs = page.locator("pre[data-logs]")
    page.wait_for_function(
        "() => document.querySelector('pre[data-logs]').textContent.includes('trainplane: step')"
    )
    length = len(logs.text_content())
    page.wait_for_function(
        "n => document.querySelector('pre[data-logs]').textContent.length > n",
        arg=length,
        timeout=30_000,
    )
    assert logs.get_attribute("data-following") == "true"
    assert page.locator('.summary [data-status="RUNNING"]').count() == 1
    shoot(page, screenshots, "job-running")


def test_the_succeeded_job_page_shows_its_model_checkpoints_and_timeline(scene, page, screenshots):
    page.goto(f"{scene.url}/jobs/{scene.succeeded}")
    assert page.locator("[data-model]").inner_text().startswith("dash-mlp v1")
    assert page.locator(".timeline li").evaluate_all("l => l.map(e => e.dataset.to)") == [
        "QUEUED",
        "STARTING",
        "RUNNING",
        "SUCCEEDED",
    ]
    steps = page.locator("[data-checkpoints] tbody tr td:first-child").all_inner_texts()
    assert steps == ["20", "10"]  # keep_last: 2
    # The embedded MLflow store has no UI address to link to; the run is closed.
    assert page.locator("[data-tracking]").inner_text() == "finished"
    page.wait_for_selector('[data-metric="loss"] path.line')
    assert chart_points(page, "loss") == 20
    assert page.locator('[data-action="cancel"]').count() == 0
    page.wait_for_function("() => document.querySelector('pre[data-logs]').dataset.ended")
    shoot(page, screenshots, "job-succeeded")


def test_the_failed_job_page_says_why(scene, page, screenshots):
    page.goto(f"{scene.url}/jobs/{scene.failed}")
    reason = page.locator("[data-reason]").inner_text()
    assert "exit" in reason.lower(), reason
    assert page.locator('.timeline li[data-to="FAILED"]').count() == 1
    page.wait_for_function(
        "() => document.querySelector('pre[data-logs]').textContent.includes('about to fail')"
    )
    shoot(page, screenshots, "job-failed")


def test_the_queued_job_page_says_what_it_waits_for(scene, page, screenshots):
    page.goto(f"{scene.url}/jobs/{scene.queued}")
    reason = page.locator("[data-reason]").inner_text()
    assert "#1 in the queue" in reason and "waiting for 2 GPUs" in reason, reason
    shoot(page, screenshots, "job-queued")


def test_the_clusters_page_shows_capacity_use_and_queued_demand(scene, page, screenshots):
    page.goto(scene.url + "/clusters")
    card = page.locator('[data-cluster="local"]')
    assert card.locator("[data-in-use]").inner_text() == "2 of 2 cpu"
    assert card.locator("[data-queued-here]").inner_text() == "1 jobs, 2 GPUs"
    assert page.locator("[data-queued]").inner_text().startswith("1 queued job")
    shoot(page, screenshots, "clusters")


def test_the_usage_page_charts_gpu_hours_by_project(scene, page, screenshots):
    page.goto(scene.url + "/usage?days=7")
    bars = page.locator('[data-chart="stacked-bars"] g.bar')
    assert bars.count() == 8  # every UTC day the window touches
    assert page.locator('[data-chart="stacked-bars"] g.bar rect.series-0').count() >= 1
    projects = page.locator('[data-table="projects"] tbody tr td:first-child').all_inner_texts()
    assert projects == ["default"]
    assert page.locator("[data-total-cost]").inner_text().startswith("$")
    assert page.locator('[data-table="experiments"]').inner_text().count("dashboard") == 1
    shoot(page, screenshots, "usage")


def test_compare_overlays_the_loss_curves_and_lists_differing_fields(scene, page, screenshots):
    page.goto(scene.url + "/")
    row(page, scene.succeeded).locator('input[name="pick"]').check()
    row(page, scene.running).locator('input[name="pick"]').check()
    page.click('[data-action="compare-selected"]')
    page.wait_for_url("**/compare?ids=*")
    lines = page.locator('[data-chart="overlay"] path.line')
    lines.first.wait_for()
    assert lines.count() == 2
    counts = dict(lines.evaluate_all("l => l.map(p => [p.dataset.series, +p.dataset.count])"))
    assert counts["mlp-done (loss)"] == 20 and counts["mlp-live (loss)"] >= 3, counts
    assert page.locator(".legend li").count() == 2
    fields = page.locator('[data-table="differences"] tbody th').all_inner_texts()
    assert "name" in fields and "entrypoint.args.steps" in fields, fields
    shoot(page, screenshots, "compare")


INVALID = """\
kind: train
name: bad-gpus
project: default
entrypoint:
  command: [python, -c, "print(1)"]
resources:
  gpus: 0
"""


def test_an_invalid_spec_pasted_in_the_submit_form_shows_the_field_and_creates_nothing(
    scene, page, console, screenshots
):
    before = scene.job_count()
    page.goto(scene.url + "/submit")
    page.fill("textarea[name=spec]", INVALID)
    page.click('[data-action="submit"]')
    error = page.locator('[data-errors] li[data-field="resources.gpus"]')
    error.wait_for()
    assert "must be at least 1" in error.inner_text()
    assert "(line 7)" in error.inner_text()
    # Said once: the heading counts the problems instead of repeating them.
    heading = page.locator("[data-errors] p").inner_text()
    assert heading.startswith("1 problem in the spec") and "at least" not in heading
    page.fill("textarea[name=spec]", "kind: train\nname: [unclosed\n")
    page.click('[data-action="plan"]')
    page.locator('[data-errors] li[data-field="body"]').wait_for()
    page.fill("textarea[name=spec]", INVALID)
    page.click('[data-action="submit"]')
    error.wait_for()
    shoot(page, screenshots, "submit-invalid")
    assert scene.job_count() == before
    # Chromium logs each refused request; those three are the point of the test.
    assert console.expected(422) == 3


def test_a_valid_spec_file_is_loaded_checked_then_submitted_from_the_form(scene, page):
    page.goto(scene.url + "/submit")
    valid = INVALID.replace("gpus: 0", "gpus: 1").replace("bad-", "ok-")
    page.set_input_files(
        "input[name=file]",
        files=[{"name": "job.yaml", "mimeType": "application/yaml", "buffer": valid.encode()}],
    )
    page.wait_for_function(
        "() => document.querySelector('textarea[name=spec]').value.includes('ok-gpus')"
    )
    page.click('[data-action="plan"]')
    page.locator("[data-plan]", has_text="Valid.").wait_for()
    planned = page.locator("[data-plan]").inner_text()
    assert "Strategy: ddp. no memory estimate: give model.parameters" in planned
    assert "Cost: unknown (no earlier run of this job to learn from)." in planned
    page.click('[data-action="submit"]')
    page.wait_for_url("**/jobs/*")
    job_id = page.url.rsplit("/", 1)[1]
    assert scene.service.job(job_id)["name"] == "ok-gpus"
    scene.service.http.post(f"/v1/jobs/{job_id}/cancel")


def test_dark_mode_is_readable(scene, browser, screenshots):
    context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme="dark")
    sign_in(context, scene.url)
    page = context.new_page()
    page.goto(f"{scene.url}/jobs/{scene.succeeded}")
    page.wait_for_selector('[data-metric="loss"] path.line')
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    text = page.evaluate("getComputedStyle(document.body).color")
    assert background == "rgb(15, 20, 25)" and text == "rgb(227, 232, 238)"
    shoot(page, screenshots, "job-succeeded-dark")
    context.close()


def test_the_pages_work_from_the_keyboard(scene, page):
    page.goto(scene.url + "/")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    # Tab order reaches the first job's link after the filters.
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.getAttribute('href') || ''").startswith("/jobs/"):
            break
    else:
        raise AssertionError("no job link reachable with Tab")
    page.keyboard.press("Enter")
    page.wait_for_url("**/jobs/*")


def test_cancel_from_the_page_asks_first_then_moves_the_job_to_cancelled(scene, page, screenshots):
    page.goto(f"{scene.url}/jobs/{scene.running}")
    page.click('[data-action="cancel"]')
    dialog = page.locator("#cancel-dialog")
    assert dialog.is_visible()
    shoot(page, screenshots, "job-cancel-confirm")
    # Keeping it changes nothing.
    dialog.locator('button[value="keep"]').click()
    assert scene.status(scene.running) == "RUNNING"
    page.click('[data-action="cancel"]')
    dialog.locator('[data-action="confirm-cancel"]').click()
    deadline = time.monotonic() + 60
    while scene.status(scene.running) != "CANCELLED" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert scene.status(scene.running) == "CANCELLED"
    # The page notices by itself and settles on the final status.
    page.wait_for_selector('.summary[data-status="CANCELLED"]', timeout=20_000)
    assert page.locator('[data-action="cancel"]').count() == 0
