"""Registering a local Ray head as a cluster, straight in a database (tests and
benchmarks do this before a server starts)."""

from __future__ import annotations

from trainplane.db.engine import make_engine, session_factory
from trainplane.services.clusters import upsert_cluster


def register_local_cluster(
    db_url: str,
    address: str,
    *,
    name: str = "local",
    slots: int,
    slots_per_node: int | None = None,
    price_per_gpu_hour: float = 0.0,
) -> None:
    """A cpu cluster of ``slots`` worker slots at ``address``, on one node
    unless ``slots_per_node`` says otherwise."""
    engine = make_engine(db_url, single_use=True)
    try:
        with session_factory(engine)() as session:
            upsert_cluster(
                session,
                name=name,
                address=address,
                accelerator="cpu",
                gpus=slots,
                gpus_per_node=slots_per_node or slots,
                gpu_memory_gb=None,
                price_per_gpu_hour=price_per_gpu_hour,
                labels={},
            )
    finally:
        engine.dispose()
