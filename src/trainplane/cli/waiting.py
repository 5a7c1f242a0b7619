"""How ``submit --wait`` reads a job until it ends: polling the API and riding
out a server that stops answering for a while, with the caller's deadline
(``--timeout``) checked in between."""

from __future__ import annotations

import time
from typing import Any

from trainplane.cli.common import TERMINAL, UNAVAILABLE_STATUSES, refusal, say
from trainplane.cli.follow import DeadlinePassed
from trainplane.cli.progress import ProgressPrinter
from trainplane.sdk.errors import TrainplaneError
from trainplane.sdk.sessions import Session

POLL_SECONDS = 1.0
# While waiting, a server that stopped answering is retried this long (by default).
RECONNECT_SECONDS = 300.0
RECONNECT_POLL_SECONDS = 2.0


class Waiter:
    """Reads the job until it ends, riding out a server that stops answering
    for a while (a restart, a network blip) instead of failing the pipeline."""

    def __init__(self, client: Session, reconnect: float, deadline: float | None) -> None:
        self.client = client
        self.reconnect = reconnect
        self.deadline = deadline
        self.last: dict[str, Any] | None = None

    def past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def check_deadline(self) -> None:
        if self.past_deadline():
            raise DeadlinePassed

    def read(self, path: str) -> Any:
        """The body of ``GET path``, retried while the server is unavailable."""
        lost_at = None
        while True:
            try:
                body = self.client.get(path)
            except TrainplaneError as exc:
                if exc.status not in UNAVAILABLE_STATUSES:
                    raise
                now = time.monotonic()
                if lost_at is None:
                    lost_at = now
                    say(f"{refusal(exc)}; retrying for up to {self.reconnect:g}s")
                if now - lost_at >= self.reconnect:
                    raise
                self.check_deadline()
                time.sleep(RECONNECT_POLL_SECONDS)
                continue
            if lost_at is not None:
                say(f"the server answers again after {time.monotonic() - lost_at:.0f}s")
            return body

    def get(self, job_id: str) -> dict[str, Any]:
        job = self.read(f"/v1/jobs/{job_id}")
        self.last = job
        return job

    def wait(self, job: dict[str, Any], printer: ProgressPrinter) -> dict[str, Any]:
        printer.seen = (job["status"], job["reason"])  # submit said it already
        printer.update(job, terminal_status=job["status"] in TERMINAL)
        while job["status"] not in TERMINAL:
            self.check_deadline()
            time.sleep(POLL_SECONDS)
            job = self.get(job["id"])
            # The end is reported once, with the run and model, by _report_end.
            printer.update(job, terminal_status=job["status"] in TERMINAL)
        return job

    def tracking(self, job: dict[str, Any], timeout: float) -> dict[str, Any]:
        """An ended job's run is closed (and its model registered) by the tracking
        loop a moment later; wait for that, a bounded time, so what is printed is
        final. A job's tracking never fails it: on time-out the run is completed
        in the background."""
        deadline = time.monotonic() + timeout
        shown = None
        while (job.get("tracking") or {}).get("status") in ("pending", "active"):
            error = job["tracking"]["error"]
            if error and error != shown:
                say(f"mlflow: {error}; retrying")
                shown = error
            if time.monotonic() > deadline:
                say(
                    f"the MLflow run is not complete after {timeout:g}s; "
                    "it will be in the background"
                )
                break
            time.sleep(0.5)
            job = self.get(job["id"])
        return job
