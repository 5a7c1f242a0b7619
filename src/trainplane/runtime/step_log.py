"""What a TrainContext adds to each report, and the step line it prints: the
throughput since the last report, and at most one log line per
:data:`LOG_EVERY_SECONDS` on rank 0."""

from __future__ import annotations

import time

from trainplane.runtime.data import ResumableLoader

LOG_EVERY_SECONDS = 10.0


class StepLog:
    def __init__(self, *, rank: int, world_size: int, grad_accum: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self.grad_accum = grad_accum
        self._last_report: tuple[float, int] | None = None
        self._last_log = 0.0

    def add_throughput(
        self, values: dict[str, float], step: int, loaders: list[ResumableLoader]
    ) -> None:
        """Step time, and samples (and tokens) per second when the first
        loader tells the batch, since the previous report; a report at the
        same step or before it adds nothing."""
        now = time.monotonic()
        previous, self._last_report = self._last_report, (now, step)
        if previous is None or step <= previous[1]:
            return
        seconds = (now - previous[0]) / (step - previous[1])
        values.setdefault("step_time_s", seconds)
        if loaders:
            loader = loaders[0]
            samples = loader.batch_size * self.world_size * self.grad_accum
            values.setdefault("samples_per_s", samples / seconds)
            if loader.tokens_per_sample:
                values.setdefault("tokens_per_s", samples * loader.tokens_per_sample / seconds)

    def maybe_log(self, step: int, values: dict[str, float], total_steps: int | None) -> None:
        if self.rank != 0:
            return
        now = time.monotonic()
        if now - self._last_log < LOG_EVERY_SECONDS and self._last_log:
            return
        self._last_log = now
        of = f"/{total_steps}" if total_steps else ""
        shown = " ".join(f"{k}={v:.4g}" for k, v in list(values.items())[:6])
        print(f"trainplane: step {step}{of} {shown}", flush=True)
