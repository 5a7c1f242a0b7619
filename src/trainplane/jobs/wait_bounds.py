"""How long first come, first served would make a job wait, and the bound on
waiting that follows from it (pure code).

Least attained service lets short jobs pass long ones, which is what makes
the mean completion time low, but on a busy cluster the jobs it passes over
can wait far longer than first come, first served would ever make anyone
wait. The bound here caps that, without runtime estimates from users:

- When a job is first queued, the work ahead of it is estimated: the running
  jobs' remaining work and the queued jobs' whole work, in GPU-seconds, over
  the cluster's GPUs. That is about how long first come, first served would
  make it wait (:func:`fifo_wait_seconds`). Work is what its project's
  finished jobs held on average (:class:`JobSizes`, learned); a job that has
  run longer than that is expected to run about as long again (long jobs
  tend to be longer still). Declared runtimes (``max_runtime``) are not
  used: they are limits that users set with room to spare. Replayed on the
  whole Philly trace with every runtime declared at twice the real one,
  counting the declarations as sizes made every estimate about twice too
  long, so the bound never fired (longest wait 363.6 h against first come,
  first served's 250.5 h); capping the learned sizes by them made the
  estimates short (the smaller of two estimates is below both), so the
  bound fired early, the order came near first come, first served's and
  the mean completion time rose from 8.3 h to 13.4 h with the longest wait
  still at 296 h. With the learned sizes alone, as without declarations:
  mean 9.8 h, longest wait 256.7 h (``benchmarks/README.md``).
- The bound is the longest of those waits among the jobs submitted lately
  (:func:`wait_bound_seconds`; a quarter by default, so that the bound comes
  down after a busy season only once its backlog has drained): first come,
  first served's longest wait over the same stretch. A job that has waited
  that long is promoted (see :mod:`trainplane.jobs.service_queues`): it goes
  ahead of the levels and holds the reservation, so nobody's wait grows much
  past it.
- "Longest" is a high quantile (:func:`quantile_index`; the 99.9th
  percentile by default), not the maximum: a burst of one project's jobs,
  each counted at its project's mean size, sets a few estimates far above
  first come, first served's real longest wait, and the maximum would keep
  the bound there for the whole window. Up to a thousand estimates the
  99.9th percentile is the maximum.

Bounding each job by its own first-come-first-served wait instead would
bring back first come, first served's order, and its mean: on Philly's
busiest month nearly every job would be promoted near the moment first come,
first served starts it (a replay: mean completion 243 h against 18 h). The
longest wait is what a user compares, and the most any job needs to give.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from trainplane.jobs.service_queues import ServiceRules

# What a job is expected to hold before anything of its project has finished
# and none of its own work is known: an hour on its GPUs.
DEFAULT_GPU_SECONDS_PER_GPU = 3600.0


@dataclass(frozen=True)
class JobSizes:
    """GPU-seconds that finished jobs held, on average: by project, and over
    all of them (for a project with no finished job yet)."""

    by_project: Mapping[str | None, float] = field(default_factory=dict)
    overall: float | None = None

    def expected_gpu_seconds(self, project_id: str | None, gpus: int) -> float:
        """What a job is expected to hold, all its attempts together."""
        learned = self.by_project.get(project_id, self.overall)
        if learned is None:
            return DEFAULT_GPU_SECONDS_PER_GPU * gpus
        return learned


class SizeTally:
    """Finished jobs' GPU-seconds, added one at a time (the replay learns as
    its jobs finish; the service reads them from the database at once)."""

    def __init__(self) -> None:
        self._by_project: dict[str | None, tuple[float, int]] = {}
        self._total = 0.0
        self._count = 0

    def add(self, project_id: str | None, gpu_seconds: float) -> None:
        total, count = self._by_project.get(project_id, (0.0, 0))
        self._by_project[project_id] = (total + gpu_seconds, count + 1)
        self._total += gpu_seconds
        self._count += 1

    def sizes(self) -> JobSizes:
        if not self._count:
            return JobSizes()
        return JobSizes(
            by_project={p: total / n for p, (total, n) in self._by_project.items()},
            overall=self._total / self._count,
        )


def learn_sizes(finished: Iterable[tuple[str | None, float]]) -> JobSizes:
    """:class:`JobSizes` from finished jobs' (project, GPU-seconds held)."""
    tally = SizeTally()
    for project_id, gpu_seconds in finished:
        tally.add(project_id, gpu_seconds)
    return tally.sizes()


def expected_left(
    sizes: JobSizes,
    *,
    project_id: str | None,
    gpus: int,
    attained_gpu_seconds: float,
) -> float:
    """GPU-seconds a job is expected to hold still. One that has held more
    than expected is expected to hold as much again: durations are heavy
    tailed, and the longer a job has run the longer it is likely to run."""
    expected = sizes.expected_gpu_seconds(project_id, gpus)
    return max(expected - attained_gpu_seconds, attained_gpu_seconds)


def fifo_wait_seconds(work_ahead_gpu_seconds: float, capacity_gpus: int) -> float:
    """About how long first come, first served would make a job wait with
    this much work ahead of it."""
    if capacity_gpus <= 0:
        return 0.0
    return work_ahead_gpu_seconds / capacity_gpus


def wait_bound_seconds(longest_fifo_wait: float | None, rules: ServiceRules) -> float | None:
    """The bound on any job's wait: the longest wait first come, first
    served would have imposed on the recent jobs, times the rules' factor,
    and at least their floor; None when the bound is off or nothing is known
    yet."""
    if rules.fifo_wait_factor <= 0 or longest_fifo_wait is None:
        return None
    return max(rules.fifo_wait_floor_seconds, rules.fifo_wait_factor * longest_fifo_wait)


def quantile_index(count: int, quantile: float) -> int:
    """Where, among ``count`` values in ascending order, their ``quantile``
    lies: the largest for 1 or for too few values to tell the quantile from
    the maximum. The replay and the database read the bound with it."""
    # Rounded first: 0.29 x 100 is 28.999... in floating point, and its rank is 29.
    return max(0, min(count - 1, int(round(quantile * count, 9))))


class RecentWaits:
    """The first-come-first-served waits estimated for the jobs submitted in
    the last ``window_seconds``, and their ``quantile`` (the replay keeps
    them as its jobs arrive; the service asks the database)."""

    def __init__(self, window_seconds: float, quantile: float = 1.0) -> None:
        self.window = window_seconds
        self.quantile = quantile
        self._arrived: deque[tuple[float, float]] = deque()  # (submitted, wait)
        self._ascending: list[float] = []

    def add(self, submitted: float, wait_seconds: float) -> None:
        self._arrived.append((submitted, wait_seconds))
        bisect.insort(self._ascending, wait_seconds)

    def longest(self, now: float) -> float | None:
        """The window's quantile of the waits (None: none in the window)."""
        while self._arrived and self._arrived[0][0] < now - self.window:
            _, wait = self._arrived.popleft()
            del self._ascending[bisect.bisect_left(self._ascending, wait)]
        if not self._ascending:
            return None
        return self._ascending[quantile_index(len(self._ascending), self.quantile)]
