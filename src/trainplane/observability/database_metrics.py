"""Figures read from the job store at scrape time, so that every replica
reports the same truth: jobs by status, the queue, GPUs in use per cluster.

A scrape costs four grouped queries, each served by an index; Prometheus
scrapes every 15-60 s.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from trainplane.db.base import utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import Cluster, Job, Project
from trainplane.jobs.states import JobStatus
from trainplane.services.clusters import READY, awaiting_placement, live_usage

log = logging.getLogger(__name__)


class DatabaseCollector(Collector):
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def collect(self) -> Iterator[Metric]:
        try:
            with self.sessions() as session, read_only(session):
                families = [*job_metrics(session, utcnow()), *cluster_metrics(session)]
            up = 1
        except Exception as exc:  # the database is down or restarting: say so, keep serving
            log.warning("metrics: the job store could not be read: %s", exc)
            families, up = [], 0
        yield from families
        yield GaugeMetricFamily(
            "trainplane_database_up", "1 when this scrape could read the job store.", value=up
        )


def job_metrics(session: Session, now: datetime) -> Iterator[Metric]:
    by_status = dict(session.execute(select(Job.status, func.count()).group_by(Job.status)).all())
    jobs = GaugeMetricFamily("trainplane_jobs", "Jobs by status.", labels=("status",))
    for status in JobStatus:
        jobs.add_metric((status.value,), by_status.get(status.value, 0))
    yield jobs

    queued = GaugeMetricFamily(
        "trainplane_queued_jobs", "Jobs waiting to be placed, by project.", labels=("project",)
    )
    rows = session.execute(
        select(Project.name, func.count())
        .join(Job, Job.project_id == Project.id)
        .where(awaiting_placement())
        .group_by(Project.name)
        .order_by(Project.name)
    )
    for project, count in rows:
        queued.add_metric((project,), count)
    yield queued

    oldest = session.scalar(select(func.min(Job.created_at)).where(awaiting_placement()))
    yield GaugeMetricFamily(
        "trainplane_queue_oldest_wait_seconds",
        "How long the longest-waiting queued job has waited since it was submitted (0: none).",
        value=max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0,
    )


def cluster_metrics(session: Session) -> Iterator[Metric]:
    usage = live_usage(session)
    labels = ("cluster",)
    used = GaugeMetricFamily(
        "trainplane_gpus_in_use", "GPUs held by live attempts, by cluster.", labels=labels
    )
    total = GaugeMetricFamily(
        "trainplane_gpus_total", "GPUs registered for each cluster.", labels=labels
    )
    up = GaugeMetricFamily(
        "trainplane_cluster_up", "1 when the cluster's last probe answered.", labels=labels
    )
    for cluster in session.execute(
        select(Cluster.id, Cluster.name, Cluster.gpus, Cluster.status).order_by(Cluster.name)
    ):
        used.add_metric((cluster.name,), usage.get(cluster.id, (0, 0))[0])
        total.add_metric((cluster.name,), cluster.gpus)
        up.add_metric((cluster.name,), 1 if cluster.status == READY else 0)
    yield from (used, total, up)
