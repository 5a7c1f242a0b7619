"""deploy/grafana/trainplane-dashboard.json: importable into any Grafana
(datasource chosen at import, no uid baked in), and every query is over the
metrics the server serves at /metrics, with their real labels."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.deploy.conftest import DEPLOY
from trainplane.jobs.states import JobStatus

DASHBOARD = DEPLOY / "grafana" / "trainplane-dashboard.json"

# What /metrics serves for the dashboard, with each metric's labels.
GAUGES = {
    "trainplane_jobs": {"status"},
    "trainplane_queued_jobs": {"project"},
    "trainplane_queue_oldest_wait_seconds": set(),
    "trainplane_gpus_in_use": {"cluster"},
    "trainplane_gpus_total": {"cluster"},
    "trainplane_cluster_up": {"cluster"},
    "trainplane_database_up": set(),
}
HISTOGRAMS = {
    "trainplane_queue_wait_seconds": set(),
    "trainplane_scheduler_pass_seconds": {"step"},
    "trainplane_http_request_duration_seconds": {"method", "route", "status"},
}
METRICS = {**GAUGES, **HISTOGRAMS}
SERIES = re.compile(r"\btrainplane_[a-z0-9_]+")
DATASOURCE = "${datasource}"


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def queries(dashboard: dict[str, Any]) -> list[str]:
    found = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", []) if t.get("expr")]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            found.append(query["query"] if isinstance(query, dict) else query)
    return found


def metric_of(series: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        base = series.removesuffix(suffix)
        if base != series and base in HISTOGRAMS:
            return base
    return series


def test_panels_have_promql_targets(dashboard):
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 8
    for panel in panels:
        assert panel.get("targets"), f"{panel['title']}: no query"
        for target in panel["targets"]:
            expr = target.get("expr", "")
            assert SERIES.search(expr), f"{panel['title']}: {expr!r} reads no trainplane metric"
            assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}")


def test_the_datasource_is_a_template_variable(dashboard):
    (variable,) = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert variable["name"] == "datasource" and variable["query"] == "prometheus"
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        for holder in (panel, *panel["targets"]):
            assert holder["datasource"]["uid"] == DATASOURCE, panel["title"]
    # Nothing else names a datasource by uid.
    uids = re.findall(r'"uid":\s*"([^"]*)"', DASHBOARD.read_text())
    assert set(uids) <= {DATASOURCE, dashboard["uid"]}, uids


def test_every_metric_is_one_the_server_serves(dashboard):
    used = set()
    for expr in queries(dashboard):
        names = {metric_of(s) for s in SERIES.findall(expr)}
        unknown = names - METRICS.keys()
        assert not unknown, f"{expr}: not served at /metrics: {sorted(unknown)}"
        for series in SERIES.findall(expr):
            if series.endswith("_bucket"):
                assert metric_of(series) in HISTOGRAMS, series
        used |= names
        # instance: the label Prometheus gives every scraped target.
        labels = set().union(*(METRICS[n] for n in names)) | {"le", "instance"}
        for group in re.findall(r"\bby \(([^)]*)\)", expr):
            for label in filter(None, (x.strip() for x in group.split(","))):
                assert label in labels, f"{expr}: {names} have no label {label!r}"
        for label in re.findall(r"[{,]\s*(\w+)\s*[!=]~?", expr):
            assert label in labels, f"{expr}: {names} have no label {label!r}"
        for statuses in re.findall(r'status[!=]~"([A-Z|]+)"', expr):
            for status in statuses.split("|"):
                assert status in {s.value for s in JobStatus}, f"{expr}: no status {status}"
    assert used == METRICS.keys(), f"never shown: {sorted(METRICS.keys() - used)}"


def test_histogram_quantiles_read_buckets(dashboard):
    for expr in queries(dashboard):
        for inner in re.findall(r"histogram_quantile\(([^,]+),(.*)", expr):
            assert "_bucket" in inner[1] and "le" in inner[1], expr
