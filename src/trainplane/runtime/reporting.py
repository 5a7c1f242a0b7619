"""Progress from rank 0 to the control plane, off the training thread.

Points are queued and sent in batches every couple of seconds (each send is
also the attempt's heartbeat), so a slow or unreachable control plane never
slows a step. The answer may ask the attempt to stop (it was preempted):
``stop_reason`` is set, and the training loop acts on it at its next report.
A 409 means the control plane considers the attempt over: the reporter stops.
A sweep's trial reports each decision step at once and waits for the answer
(``TRAINPLANE_DECISION_STEPS``): its sweep judges it there, and a trial to
prune stops at that step, not a couple of seconds of training later.
A 429 (reporting too often) makes it wait the Retry-After asked, points kept.
Without a control plane (a local run) points can go to a JSON Lines file
instead.

Restarts Ray Train makes in place are told through the same endpoint, one
at a time and at once (:func:`report_restart`): each spends the job's restart
budget, so the scheduler must know of it before the attempt ends.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import httpx

from trainplane.jobs.progress import (
    MAX_RESTART_ERROR,
    InPlaceRestart,
    MetricPoint,
    ProgressReport,
)
from trainplane.runtime import env as tp_env

SEND_EVERY_SECONDS = 2.0
# At a sweep's decision step rank 0 waits this long at most for the answer
# (whether the trial goes on); past it, training goes on and hears it later.
DECISION_WAIT_SECONDS = 30.0
HEARTBEAT_SECONDS = 10.0  # with nothing new to send, post this often anyway
MAX_BATCH = 1000
MAX_QUEUED = 20_000  # beyond this the oldest points are dropped, never the run


def progress_endpoint(
    url: str | None, job_id: str | None, attempt_id: str | None, token: str | None
) -> str | None:
    """Where the attempt reports; None without a control plane to report to."""
    if url and job_id and attempt_id and token:
        return f"{url.rstrip('/')}/v1/jobs/{job_id}/attempts/{attempt_id}/progress"
    return None


class ProgressReporter:
    def __init__(
        self,
        *,
        url: str | None,
        job_id: str | None,
        attempt_id: str | None,
        token: str | None,
        metrics_file: str | None = None,
        send_every: float = SEND_EVERY_SECONDS,
        on_stop: Callable[[str], None] | None = None,
        decision_steps: Sequence[int] = (),
        decision_wait: float = DECISION_WAIT_SECONDS,
    ) -> None:
        self.endpoint = progress_endpoint(url, job_id, attempt_id, token)
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.metrics_file = metrics_file
        self.send_every = send_every
        self.queue: deque[MetricPoint] = deque(maxlen=MAX_QUEUED)
        self.step: int | None = None
        self.total_steps: int | None = None
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.closing = False
        self.revoked = False
        # Set when the control plane asks the attempt to checkpoint and stop.
        self.stop_reason: str | None = None
        self.on_stop = on_stop  # called (on the sending thread) with the reason, once
        self.failures = 0
        self.last_sent = 0.0
        self.retry_at = 0.0  # a 429 asked to wait until then (time.monotonic())
        self.sending = False  # a batch is out of the queue but not yet delivered
        # A sweep's trial: the decision steps not reached yet, ascending; the
        # highest step of a batch the control plane has answered, under ``answered``.
        self.decision_steps = sorted(set(decision_steps))
        self.decision_wait = decision_wait
        self.answered = threading.Condition()
        self.answered_step = -1
        self.thread: threading.Thread | None = None
        if self.endpoint:
            self.thread = threading.Thread(
                target=self._run, name="trainplane-progress", daemon=True
            )
            self.thread.start()

    def record(self, step: int, metrics: dict[str, float], total_steps: int | None) -> None:
        self.record_points([(step, time.time(), metrics)], total_steps)

    def record_points(
        self, points: Sequence[tuple[int, float, dict[str, float]]], total_steps: int | None
    ) -> None:
        """Queue (step, time, metrics) points, in step order, for the sending
        thread: the caller only appends, except at a decision step."""
        if not points:
            return
        # Built unchecked: the control plane validates the report and names
        # what it refuses (a 422 the run survives); a check here would raise
        # in the training loop instead.
        built = [
            MetricPoint.model_construct(
                step=step,
                time=at,
                metrics={k: v for k, v in metrics.items() if math.isfinite(v)},
            )
            for step, at, metrics in points
        ]
        if self.metrics_file:
            with open(self.metrics_file, "a") as handle:
                handle.writelines(json.dumps(p.model_dump(mode="json")) + "\n" for p in built)
        if self.endpoint is None or self.revoked:
            return
        step = built[-1].step
        with self.lock:
            self.queue.extend(built)
            self.step = step
            self.total_steps = total_steps
        if self.decision_steps and step >= self.decision_steps[0]:
            while self.decision_steps and step >= self.decision_steps[0]:
                self.decision_steps.pop(0)
            self._await_answer(step)

    def _await_answer(self, step: int) -> None:
        """Send what is queued now and wait (at most ``decision_wait``) until
        the control plane answered a batch up to ``step``: the sweep judges the
        trial at a decision step, and a stop it asks for is known on return."""
        self.wake.set()
        with self.answered:
            heard = self.answered.wait_for(
                lambda: self.answered_step >= step or self.revoked, self.decision_wait
            )
        if not heard:
            print(
                f"trainplane: no answer to the report of decision step {step} within "
                f"{self.decision_wait:g} s; going on",
                flush=True,
            )

    def flush(self, timeout: float = 2.0) -> None:
        """Wait (at most ``timeout`` seconds) until what is queued has been sent."""
        if self.thread is None or self.revoked:
            return
        self.wake.set()
        with self.answered:  # woken by each batch sent, not polled
            self.answered.wait_for(
                lambda: not (self.queue or self.sending) or self.revoked, timeout
            )

    def close(self, timeout: float = 10.0) -> None:
        """Send what is queued, waiting at most ``timeout`` seconds."""
        if self.thread is None:
            return
        self.closing = True
        self.wake.set()
        self.thread.join(timeout)

    def _run(self) -> None:
        with httpx.Client(timeout=10.0, headers=self.headers) as client:
            while not self.revoked:
                self.wake.wait(self.send_every)
                self.wake.clear()
                self._send(client)
                if self.closing and (not self.queue or self.failures >= 3):
                    return

    def _send(self, client: httpx.Client) -> None:
        assert self.endpoint is not None
        if time.monotonic() < self.retry_at:
            return
        if not self.queue and time.monotonic() - self.last_sent < HEARTBEAT_SECONDS:
            return
        with self.lock:
            batch = [self.queue.popleft() for _ in range(min(len(self.queue), MAX_BATCH))]
            report = ProgressReport.model_construct(
                step=self.step, total_steps=self.total_steps, points=batch
            )
            # Restarts in place go on their own (report_restart).
            body = report.model_dump(mode="json", exclude={"restarts"})
            self.sending = True
        try:
            self._post(client, body, batch)
        finally:
            self.sending = False  # only once a failed batch is back in the queue
            with self.answered:
                self.answered.notify_all()  # a flush waits for this

    def _post(self, client: httpx.Client, body: dict[str, Any], batch: list[MetricPoint]) -> None:
        assert self.endpoint is not None
        try:
            answer = client.post(self.endpoint, json=body)
        except httpx.HTTPError:
            answer = None
        if answer is not None and answer.status_code in (401, 409):
            # The attempt is over as far as the control plane knows (409), or
            # its token no longer holds (401): nothing sent now would count.
            self.revoked = True
            print(f"trainplane: progress reports stopped ({answer.status_code})", flush=True)
            self._answered(batch)
            return
        if answer is not None and answer.status_code == 429:
            # Reporting too often: wait as asked, keep the points, never fail the run.
            self.retry_at = time.monotonic() + retry_after(answer)
        if answer is None or answer.status_code >= 500 or answer.status_code == 429:
            self.failures += 1
            with self.lock:
                self.queue.extendleft(reversed(batch))  # try again next time
            return
        self.failures = 0
        self.last_sent = time.monotonic()
        if answer.status_code == 200:
            self._read_answer(answer)
        if answer.status_code >= 400:
            print(
                f"trainplane: the control plane refused progress ({answer.status_code}): "
                f"{answer.text[:300]}",
                flush=True,
            )
        self._answered(batch)  # after the stop it asks for is known

    def _answered(self, batch: list[MetricPoint]) -> None:
        with self.answered:
            if batch:
                self.answered_step = max(self.answered_step, max(p.step for p in batch))
            self.answered.notify_all()  # a waiter also wakes for a revoked reporter

    def _read_answer(self, answer: httpx.Response) -> None:
        reason = stop_reason_of(answer)
        if reason is not None and self.stop_reason is None:
            self.stop_reason = reason
            print(
                f"trainplane: the control plane asks this attempt to stop ({self.stop_reason})",
                flush=True,
            )
            if self.on_stop is not None:
                self.on_stop(reason)


def decision_steps_of(environ: Mapping[str, str]) -> list[int]:
    """The steps at which a sweep judges this trial (TRAINPLANE_DECISION_STEPS);
    none for any other job, or when the value does not read."""
    text = environ.get(tp_env.DECISION_STEPS) or ""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        return []


def stop_reason_of(answer: httpx.Response) -> str | None:
    """The reason of the stop a progress answer asks for, if it asks for one."""
    try:
        stop = (answer.json() or {}).get("stop")
    except (ValueError, AttributeError):
        return None
    return str(stop["reason"]) if isinstance(stop, dict) and stop.get("reason") else None


def retry_after(answer: httpx.Response) -> float:
    try:
        return min(max(float(answer.headers.get("Retry-After", "")), 0.0), HEARTBEAT_SECONDS)
    except ValueError:
        return SEND_EVERY_SECONDS


def report_restart(
    kind: Literal["worker_group", "placement"],
    number: int,
    error: str,
    *,
    environ: Mapping[str, str],
    tries: int = 3,
    timeout: float = 5.0,
) -> bool:
    """Tell the control plane of the attempt's ``number``-th restart in place
    (the attempt's ids, token and control plane are read from ``environ``);
    True once it is recorded. Tried a few times: a restart it never hears of
    is one the budget does not count. Without a control plane (a local run)
    nothing is sent."""
    token = environ.get(tp_env.ATTEMPT_TOKEN)
    endpoint = progress_endpoint(
        environ.get(tp_env.CONTROL_PLANE_URL),
        environ.get(tp_env.JOB_ID),
        environ.get(tp_env.ATTEMPT_ID),
        token,
    )
    if endpoint is None:
        return False
    restart = InPlaceRestart(kind=kind, number=number, error=error[:MAX_RESTART_ERROR])
    body = ProgressReport(restarts=[restart]).model_dump(mode="json", exclude_none=True)
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=timeout, headers=headers) as client:
        for attempt in range(1, tries + 1):
            try:
                answer = client.post(endpoint, json=body)
            except httpx.HTTPError:
                answer = None
            if answer is not None and answer.status_code < 300:
                return True
            busy = answer is not None and answer.status_code == 429
            if answer is not None and not busy and answer.status_code < 500:
                # Refused for good (the attempt ended, the token no longer holds).
                print(
                    f"trainplane: the control plane refused a restart report "
                    f"({answer.status_code}): {answer.text[:300]}",
                    flush=True,
                )
                return False
            if attempt < tries:
                time.sleep(retry_after(answer) if answer is not None and busy else attempt)
    print("trainplane: the control plane did not hear of a restart in place", flush=True)
    return False
