"""The order queued jobs are offered GPUs when projects compete (pure code).

Within a project, jobs keep the queue order (priority, then submit time).
Across projects, the next job offered is the next one of the project whose
GPUs in use, divided by its weight, are lowest: the project furthest below
its share (with one resource, GPUs, this is dominant resource fairness).
Each job offered counts against its project as if it started, so a pass
interleaves projects by their weights. A big job that cannot start still
heads its project's line, gets the placement reservation when its turn
comes, and so cannot be starved by the others' small jobs.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping, Sequence

from trainplane.jobs.placement import Demand


def fair_order(
    queue: Sequence[Demand], in_use: Mapping[str, int], weights: Mapping[str, float]
) -> list[Demand]:
    """``queue`` (in queue order) reordered by fair share; ``in_use``: GPUs
    each project holds now; ``weights``: each project's weight (default 1)."""
    lines: dict[str | None, deque[tuple[int, Demand]]] = {}
    for index, demand in enumerate(queue):
        lines.setdefault(demand.project_id, deque()).append((index, demand))
    if len(lines) < 2:
        return list(queue)
    used = {p: float(in_use.get(p, 0)) if p else 0.0 for p in lines}

    def share(project: str | None) -> float:
        return used[project] / max(weights.get(project, 1.0) if project else 1.0, 1e-9)

    # (share, index of the project's next job in queue order, project): ties
    # go to whichever job has waited longest at its priority.
    heap = [(share(p), line[0][0], i, p) for i, (p, line) in enumerate(lines.items())]
    heapq.heapify(heap)
    ordered: list[Demand] = []
    while heap:
        _, _, tie, project = heapq.heappop(heap)
        line = lines[project]
        _, demand = line.popleft()
        ordered.append(demand)
        used[project] += demand.gpus
        if line:
            heapq.heappush(heap, (share(project), line[0][0], tie, project))
    return ordered
