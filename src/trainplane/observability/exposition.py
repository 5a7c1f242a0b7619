"""The text ``/metrics`` answers: this process's instruments, then the job
store's figures."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy.orm import Session, sessionmaker

from trainplane.observability.database_metrics import DatabaseCollector
from trainplane.observability.instruments import PROCESS_REGISTRY


def metrics_text(sessions: sessionmaker[Session]) -> bytes:
    # A registry per scrape: each app (and test) has its own database.
    database = CollectorRegistry(auto_describe=False)
    database.register(DatabaseCollector(sessions))
    return generate_latest(PROCESS_REGISTRY) + generate_latest(database)
