"""Measurements taken inside this process: API latency, scheduler passes and
queue waits. They live in a registry of their own (not prometheus_client's
global one), which ``/metrics`` serves beside the database's figures.

Each process counts only what it did: with several replicas Prometheus scrapes
each and sums them. Run one server process per container (``--workers 1``) so
that every scrape sees one process's counts.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics

# The *_created series only restate the process start time.
disable_created_metrics()
PROCESS_REGISTRY = CollectorRegistry(auto_describe=True)

# Seconds; from a fast API answer to a slow cluster call.
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Queue waits run from seconds to days.
_WAIT_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400, 7 * 86400)

HTTP_REQUEST_SECONDS = Histogram(
    "trainplane_http_request_duration_seconds",
    "API requests, from arrival to the response's first byte, by route template.",
    ("method", "route", "status"),
    buckets=_LATENCY_BUCKETS,
    registry=PROCESS_REGISTRY,
)

SCHEDULER_PASS_SECONDS = Histogram(
    "trainplane_scheduler_pass_seconds",
    "Duration of each step of a scheduler iteration run by this process.",
    ("step",),
    buckets=_LATENCY_BUCKETS,
    registry=PROCESS_REGISTRY,
)

QUEUE_WAIT_SECONDS = Histogram(
    "trainplane_queue_wait_seconds",
    "From a job's submission to its first placement, for jobs this process placed.",
    buckets=_WAIT_BUCKETS,
    registry=PROCESS_REGISTRY,
)
