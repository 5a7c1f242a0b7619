"""The shape of a job's gang of workers and the Ray placement group that holds it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GangShape:
    """How many workers, how they spread over nodes, and what each reserves."""

    workers: int
    workers_per_node: int | None  # None: Ray packs them wherever they fit
    cpus_per_worker: float
    gpu: bool

    @property
    def nodes(self) -> int:
        return self.workers // self.workers_per_node if self.workers_per_node else 1

    def bundles(self) -> tuple[list[dict[str, float]], str]:
        per_worker = {"CPU": self.cpus_per_worker} | ({"GPU": 1.0} if self.gpu else {})
        if not self.workers_per_node:
            return [dict(per_worker) for _ in range(self.workers)], "PACK"
        # One bundle per node holding that node's workers gives exactly
        # workers_per_node on each node.
        node = {k: v * self.workers_per_node for k, v in per_worker.items()}
        return [dict(node) for _ in range(self.nodes)], (
            "STRICT_SPREAD" if self.nodes > 1 else "STRICT_PACK"
        )
