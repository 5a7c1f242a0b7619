"""When the ranks of a TrainContext meet, so that reporting costs no collective per step.

Every rank calls ``ctx.report`` at the same steps, but what a report needs
from the other ranks (tensor metrics averaged over the ranks, the stop the
control plane asked rank 0 for, whether rank 0's clock says a time-based
checkpoint is due) is gathered only at *meetings*: about once per
:data:`MEET_SECONDS`, at a step every rank knows in advance, because rank 0
names the next meeting's step at each meeting. Between meetings a report
only appends to a bounded list on the training thread; at a meeting the
pending tensor metrics of all those steps go in one all-reduce, each step's
point keeping the time it was reported at.

Steps every rank knows of on its own (a sweep's decision steps, the
checkpoint policy's every_steps saves) are always meetings, so a decision is
taken on that step's metrics and a checkpoint's manifest has them. In a world
of one there is nothing to gather and every report is a meeting.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from trainplane.runtime.gpu_figures import GpuFigures
from trainplane.runtime.preemption import STOP_REASONS
from trainplane.runtime.reporting import ProgressReporter
from trainplane.runtime.step_log import StepLog

# How often (roughly) the ranks meet: a stop asked for is acted on within
# this on top of the reporter's own send interval.
MEET_SECONDS = 1.0
STOP_CODES = sorted(STOP_REASONS)
MAX_PENDING = 1000  # steps between meetings at most (bounds the list and the all-reduce)


@dataclass
class Pending:
    """One report not yet gathered."""

    step: int
    at: float  # time.time() when it was reported
    values: dict[str, float]  # the caller's plain numbers (rank 0's count)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # averaged over the ranks
    extra: dict[str, float] = field(default_factory=dict)  # what the runtime adds (throughput)

    def metrics(self) -> dict[str, float]:
        """What the point reports: the runtime's figures never hide the caller's."""
        return {**self.extra, **self.values}


@dataclass(frozen=True)
class Meeting:
    """What rank 0 told every rank at a meeting."""

    stop: str | None  # the stop rank 0 heard was asked for (a checkpoint reason)
    time_due: bool  # rank 0's clock says a time-based checkpoint is due


class StepSync:
    def __init__(
        self,
        *,
        world_size: int,
        device: torch.device,
        decision_steps: list[int] | tuple[int, ...] = (),
        reporter: ProgressReporter | None = None,
        step_log: StepLog | None = None,
        meet_seconds: float = MEET_SECONDS,
    ) -> None:
        self.reporter = reporter  # rank 0's; None elsewhere
        self.step_log = step_log
        self.world_size = world_size
        self.device = device
        self.decision_steps = sorted(set(decision_steps))
        self.meet_seconds = meet_seconds
        self.pending: list[Pending] = []
        self.next_meeting = 0  # the first report is a meeting
        self._last_meeting: tuple[float, int] | None = None

    @property
    def distributed(self) -> bool:
        return self.world_size > 1 and dist.is_initialized()

    def add(
        self,
        step: int,
        values: dict[str, float],
        tensors: dict[str, torch.Tensor],
        extra: dict[str, float],
    ) -> None:
        """Keep one report until the next gathering (the training thread's only work)."""
        kept = {name: t.detach().reshape(()) for name, t in tensors.items()}
        self.pending.append(Pending(step, time.time(), values, kept, extra))

    def meets_at(self, step: int) -> bool:
        """Whether ``step`` is a meeting; the same answer on every rank."""
        if not self.distributed or step >= self.next_meeting:
            return True
        if self.decision_steps and step >= self.decision_steps[0]:
            return True
        return len(self.pending) >= MAX_PENDING

    def flush(self, total_steps: int | None, *, figures: GpuFigures | None = None) -> Pending:
        """Gather what is pending (:meth:`gather`) and hand it to rank 0's
        reporter; the latest point (an empty one when none was pending).
        ``figures``: the ranks' GPU figures are added to it (collective on GPUs)."""
        points = self.gather()
        if not points:
            return Pending(-1, time.time(), {})
        latest = points[-1]
        for name, value in (figures.gather() if figures is not None else {}).items():
            latest.extra.setdefault(name, value)
        if self.reporter is not None:
            self.reporter.record_points([(p.step, p.at, p.metrics()) for p in points], total_steps)
        if self.step_log is not None:
            self.step_log.maybe_log(latest.step, latest.metrics(), total_steps)
        return latest

    def gather(self) -> list[Pending]:
        """The pending reports with their tensor metrics averaged over the
        ranks, as plain numbers in ``values``; one all-reduce for all of them.
        Collective whenever anything is pending (the same on every rank)."""
        pending, self.pending = self.pending, []
        names = [(i, name) for i, point in enumerate(pending) for name in point.tensors]
        if names:
            device = self._comm_device()
            stacked = torch.stack(
                [pending[i].tensors[name].to(device, torch.float64) for i, name in names]
            )
            if self.distributed:
                dist.all_reduce(stacked)
                stacked /= self.world_size
            for (i, name), value in zip(names, stacked.tolist(), strict=True):
                pending[i].values.setdefault(name, value)
        for point in pending:
            point.tensors = {}
        return pending

    def meet(self, step: int, *, stop: str | None, time_due: bool) -> Meeting:
        """Rank 0's stop code and clock shared with every rank, and the next
        meeting's step set from rank 0's pace. Collective across ranks."""
        while self.decision_steps and step >= self.decision_steps[0]:
            self.decision_steps.pop(0)
        if not self.distributed:
            return Meeting(stop, time_due)
        # A stop travels as 1 + its reason's place in STOP_CODES; 0: go on.
        code = 0 if stop is None else 1 + STOP_CODES.index(stop)
        control = torch.tensor(
            [code, int(time_due), step + self._steps_to_next(step)],
            dtype=torch.int64,
            device=self._comm_device(),
        )
        dist.broadcast(control, src=0)
        code, due, upcoming = (int(v) for v in control.tolist())
        self.next_meeting = upcoming
        return Meeting(STOP_CODES[code - 1] if code else None, bool(due))

    def _steps_to_next(self, step: int) -> int:
        """Steps until the next meeting: about ``meet_seconds`` at rank 0's pace."""
        now = time.monotonic()
        previous, self._last_meeting = self._last_meeting, (now, step)
        if previous is None or step <= previous[1] or now <= previous[0]:
            return 1
        per_step = (now - previous[0]) / (step - previous[1])
        return max(1, min(MAX_PENDING, int(self.meet_seconds / per_step)))

    def _comm_device(self) -> torch.device:
        return self.device if self.device.type == "cuda" else torch.device("cpu")
