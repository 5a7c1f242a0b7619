"""A sweep's page in a real browser (headless Chromium) against a real
``trainplane server`` (its scheduler off): the trial table sorts by any
column and keeps its order when the page refreshes itself, a chart per
parameter plots the objective (a log axis for a log-uniform one) with the
best trial marked, picked trials open in the compare page, and a trial's
page links back to its sweep. The sweep and its trials are written to the
database as the controller and runtimes write them, so no Ray is needed."""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from tests.dashboard.conftest import VIEWPORT
from tests.factories import EXAMPLES, make_cluster
from tests.sweep_rows import add_trial, insert_sweep, set_sweep_status, sweep_spec
from trainplane.db.engine import make_engine, session_factory
from trainplane.jobs.states import JobStatus
from trainplane.testing.server import ServerProcess

pytestmark = pytest.mark.timeout(300)

ROOT = "a-bootstrap-token-for-the-sweep-page"
LR, BATCH, OPTIMIZER = (
    "entrypoint.args.lr",
    "entrypoint.args.global_batch",
    "entrypoint.args.optimizer",
)
# number -> (lr, batch, optimizer, status, losses)
TRIALS = {
    1: (0.001, 32, "adam", JobStatus.SUCCEEDED, [2.0, 0.8]),
    2: (0.01, 64, "sgd", JobStatus.SUCCEEDED, [1.5, 0.3]),
    3: (0.1, 32, "sgd", JobStatus.CANCELLED, [4.0]),
    4: (0.5, 64, "adam", JobStatus.RUNNING, [1.2]),
}


@dataclass
class SweepScene:
    url: str
    session: Session
    sweep: str
    trials: dict[int, str]


@pytest.fixture(scope="module")
def scene(_sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SweepScene]:
    home = tmp_path_factory.mktemp("sweep-page")
    shutil.copyfile(_sqlite_template, home / "trainplane.db")
    url = f"sqlite:///{home / 'trainplane.db'}"
    env = {
        "TRAINPLANE_DATABASE_URL": url,
        "TRAINPLANE_HOME": str(home),
        "TRAINPLANE_BOOTSTRAP_TOKEN": ROOT,
        "TRAINPLANE_SERVER_PATHS": str(EXAMPLES),
    }
    engine = make_engine(url)
    with ServerProcess(env, log_path=home / "server.log", args=("--no-scheduler",)) as server:
        spec = sweep_spec("lr-page")
        spec["parameters"][OPTIMIZER] = {"values": ["adam", "sgd"]}
        with session_factory(engine)() as session:
            sweep = insert_sweep(session, spec)
            cluster = make_cluster(session, gpus=4, price_per_gpu_hour=1.0)
            set_sweep_status(session, sweep, JobStatus.RUNNING)
            trials = {
                n: add_trial(
                    session,
                    sweep,
                    n,
                    {LR: lr, BATCH: batch, OPTIMIZER: optimizer},
                    status=status,
                    losses=losses,
                    cluster_id=cluster.id,
                    pruned="pruned at rung 0 (step 10)" if status is JobStatus.CANCELLED else None,
                )
                for n, (lr, batch, optimizer, status, losses) in TRIALS.items()
            }
            yield SweepScene(server.url, session, sweep, trials)
    engine.dispose()


@pytest.fixture
def page(page: Any, scene: SweepScene) -> Any:
    answer = page.context.request.post(
        f"{scene.url}/login", form={"token": ROOT}, headers={"Origin": scene.url}
    )
    assert answer.ok, answer.status
    return page


def order(page: Any) -> list[str]:
    return page.locator('[data-table="trials"] tbody tr[data-trial-id]').evaluate_all(
        "rows => rows.map(r => r.dataset.trialId)"
    )


def sort_by(page: Any, label: str) -> None:
    page.locator('[data-table="trials"] thead button[data-sort]', has_text=label).first.click()


def test_the_sweep_page_lists_sorts_and_charts_its_trials(scene, page, screenshots):
    ids = scene.trials
    page.goto(f"{scene.url}/jobs/{scene.sweep}")
    assert order(page) == [ids[1], ids[2], ids[3], ids[4]]  # by number
    statuses = page.locator("tbody tr[data-trial-id]").evaluate_all(
        "rows => rows.map(r => r.dataset.status)"
    )
    assert statuses == ["SUCCEEDED", "SUCCEEDED", "CANCELLED", "RUNNING"]
    headers = page.locator("thead th[data-parameter]").evaluate_all(
        "cells => cells.map(c => c.dataset.parameter)"
    )
    assert headers == [LR, BATCH, OPTIMIZER]
    # The best is the succeeded trial with the lowest loss, not the running one.
    assert page.locator("tr[data-best]").get_attribute("data-trial-id") == ids[2]
    assert page.locator("[data-best-trial] a").get_attribute("href") == f"/jobs/{ids[2]}"
    assert page.locator(f'tr[data-trial-id="{ids[3]}"] .reason').inner_text().startswith("pruned")

    sort_by(page, "loss last")
    assert order(page) == [ids[2], ids[1], ids[4], ids[3]]  # 0.3, 0.8, 1.2, 4.0
    sort_by(page, "loss last")
    assert order(page) == [ids[3], ids[4], ids[1], ids[2]]
    assert page.locator('th[aria-sort="descending"]').count() == 1
    sort_by(page, OPTIMIZER)
    assert [order(page).index(ids[n]) < 2 for n in (1, 4)] == [True, True]  # adam first
    sort_by(page, "loss last")

    figures = page.locator('[data-chart="sweep"]')
    assert figures.count() == 3
    for path in (LR, BATCH, OPTIMIZER):
        dots = page.locator(f'[data-chart="sweep"][data-parameter="{path}"] circle.dot')
        dots.first.wait_for()
        assert dots.count() == 4
    lr_chart = page.locator(f'[data-chart="sweep"][data-parameter="{LR}"]')
    assert lr_chart.locator("svg").get_attribute("data-scale") == "log"
    assert lr_chart.locator("text.axis-label").all_text_contents() == [LR, "loss (last)"]
    x = {
        float(d.get_attribute("data-x")): float(d.get_attribute("cx"))
        for d in lr_chart.locator("circle.dot").all()
    }
    # Equal ratios of the learning rate lie equal distances apart.
    assert math.isclose(x[0.01] - x[0.001], x[0.1] - x[0.01], rel_tol=0.02)
    best = lr_chart.locator("circle.dot.best")
    assert best.count() == 1 and best.get_attribute("data-x") == "0.01"
    assert lr_chart.locator("a.point").first.get_attribute("href").startswith("/jobs/")
    categories = page.locator(f'[data-chart="sweep"][data-parameter="{OPTIMIZER}"] .axes text')
    assert {"adam", "sgd"} <= set(categories.all_text_contents())
    shoot(page, screenshots, "sweep")

    # A trial that starts meanwhile shows up, in the order the table is sorted by.
    ids[5] = add_trial(
        scene.session, scene.sweep, 5, {LR: 0.003, BATCH: 32, OPTIMIZER: "adam"},
        status=JobStatus.RUNNING, losses=[0.1],
    )  # fmt: skip
    page.wait_for_function(
        "() => document.querySelectorAll('[data-table=\"trials\"] tbody tr[data-trial-id]')"
        ".length === 5",
        timeout=20_000,
    )
    assert order(page)[0] == ids[5]
    page.wait_for_function(
        f"() => document.querySelectorAll('[data-parameter=\"{LR}\"] circle.dot').length === 5"
    )


def test_picked_trials_open_in_compare_and_a_trial_links_to_its_sweep(scene, page):
    ids = scene.trials
    page.goto(f"{scene.url}/jobs/{scene.sweep}")
    button = page.locator('[data-action="compare-selected"]')
    assert button.is_disabled()
    for n in (1, 2):
        page.locator(f'tr[data-trial-id="{ids[n]}"] input[name="pick"]').check()
    button.click()
    page.wait_for_url("**/compare?ids=*")
    assert set(page.url.split("ids=")[1].split("%2C")) == {ids[1], ids[2]}
    lines = page.locator('[data-chart="overlay"] path.line')
    lines.first.wait_for()
    assert lines.count() == 2
    assert page.locator('[data-table="differences"] tbody th', has_text=LR).count() == 1

    page.goto(f"{scene.url}/jobs/{ids[2]}")
    link = page.locator("a[data-sweep-link]")
    assert link.get_attribute("href") == f"/jobs/{scene.sweep}" and link.inner_text() == "lr-page"
    page.goto(f"{scene.url}/jobs/{scene.sweep}")
    page.locator(f'tr[data-trial-id="{ids[2]}"] a[href="/jobs/{ids[2]}"]').click()
    page.wait_for_url(f"**/jobs/{ids[2]}")


def shoot(page: Any, folder: Path, name: str) -> None:
    page.set_viewport_size(VIEWPORT)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(folder / f"{name}.png"))
    page.screenshot(path=str(folder / f"{name}-full.png"), full_page=True)
