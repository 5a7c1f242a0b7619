"""Job logs: read from the attempt's Ray job while the cluster has it, from the
tail trainplane kept once it ended otherwise; and followed live, across
attempts, as server-sent events, for as long as the caller's token works."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass

from anyio import to_thread
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from trainplane.backends.ray import ClusterUnreachable, RayClusters
from trainplane.db.engine import read_only
from trainplane.db.models import Cluster, JobAttempt
from trainplane.errors import NotFoundError
from trainplane.jobs.states import TERMINAL_STATUSES, AttemptStatus, JobStatus
from trainplane.services import tokens
from trainplane.services.access import Caller
from trainplane.services.jobs import load_job

LIVE = (AttemptStatus.PENDING, AttemptStatus.SUBMITTED, AttemptStatus.RUNNING)
KEEPALIVE_SECONDS = 15.0
POLL_SECONDS = 1.0
# How soon a followed log notices that its caller's token was revoked or expired.
TOKEN_CHECK_SECONDS = 3.0


@dataclass(frozen=True)
class AttemptLog:
    attempt_id: str
    number: int
    status: AttemptStatus
    cluster_name: str | None
    cluster_address: str | None
    log_tail: str

    @property
    def launched(self) -> bool:
        return self.status is not AttemptStatus.PENDING


@dataclass(frozen=True)
class JobLogState:
    status: JobStatus
    reason: str
    attempts: list[AttemptLog]


def log_state(session: Session, caller: Caller, job_id: str) -> JobLogState:
    with read_only(session):
        job = load_job(session, caller, job_id)
        rows = session.execute(
            select(JobAttempt, Cluster.name, Cluster.address)
            .outerjoin(Cluster, Cluster.id == JobAttempt.cluster_id)
            .where(JobAttempt.job_id == job_id)
            .order_by(JobAttempt.number)
        )
        attempts = [
            AttemptLog(a.id, a.number, AttemptStatus(a.status), name, address, a.log_tail)
            for a, name, address in rows
        ]
        return JobLogState(JobStatus(job.status), job.reason, attempts)


def pick_attempt(state: JobLogState, number: int | None) -> AttemptLog | None:
    if number is None:
        return state.attempts[-1] if state.attempts else None
    for attempt in state.attempts:
        if attempt.number == number:
            return attempt
    raise NotFoundError(f"the job has no attempt {number}")


def read_attempt_log(attempt: AttemptLog, clusters: RayClusters) -> str:
    """The full log from the cluster when it still has it, else the kept tail."""
    if attempt.launched and attempt.cluster_address:
        try:
            text = clusters.get(attempt.cluster_address).logs(attempt.attempt_id)
        except ClusterUnreachable:
            text = None
        if text is not None:
            return text
    return attempt.log_tail


def sse(event: str, data: str) -> bytes:
    lines = data.split("\n") if data else [""]
    return (f"event: {event}\n" + "".join(f"data: {line}\n" for line in lines) + "\n").encode()


def follow_job_logs(
    sessions: sessionmaker[Session], caller: Caller, job_id: str, clusters: RayClusters
) -> AsyncIterator[bytes]:
    """Every attempt's log in order, live while it runs; ends with an ``end``
    event carrying the job's final status, or with an ``error`` event
    (``{"status": 401, "detail": ...}``) once the caller's token is revoked
    or expires: a stream is no way around revoking a token."""
    return _while_token_works(_follow(sessions, caller, job_id, clusters), sessions, caller)


async def _while_token_works(
    stream: AsyncGenerator[bytes, None], sessions: sessionmaker[Session], caller: Caller
) -> AsyncIterator[bytes]:
    """``stream``, cut off within TOKEN_CHECK_SECONDS of the caller's token
    lapsing, whether the stream is busy or quiet at the time."""

    def lapsed() -> str | None:
        with sessions() as session:
            return tokens.lapse_reason(session, caller)

    chunks: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(maxsize=1)

    async def pump() -> None:
        try:
            async with aclosing(stream):
                async for chunk in stream:
                    await chunks.put(chunk)
            await chunks.put(None)
        except Exception as exc:
            await chunks.put(exc)

    reader = asyncio.create_task(pump())
    waiting: asyncio.Task[bytes | BaseException | None] | None = None
    check_at = time.monotonic() + TOKEN_CHECK_SECONDS
    try:
        while True:
            left = check_at - time.monotonic()
            if left <= 0:
                reason = await to_thread.run_sync(lapsed)
                if reason is not None:
                    yield sse("error", json.dumps({"status": 401, "detail": reason}))
                    return
                check_at = time.monotonic() + TOKEN_CHECK_SECONDS
                continue
            # The same get() is waited on again after a timeout, so no chunk is lost.
            waiting = waiting or asyncio.ensure_future(chunks.get())
            done, _ = await asyncio.wait({waiting}, timeout=left)
            if not done:
                continue
            item, waiting = waiting.result(), None
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        if waiting is not None:
            waiting.cancel()
        reader.cancel()


async def _follow(
    sessions: sessionmaker[Session], caller: Caller, job_id: str, clusters: RayClusters
) -> AsyncGenerator[bytes, None]:
    def snapshot() -> JobLogState:
        with sessions() as session:
            return log_state(session, caller, job_id)

    shown = 0  # attempts whose log has been sent in full
    last_status: tuple[str, str] | None = None
    idle = 0.0
    while True:
        state = await to_thread.run_sync(snapshot)
        if (state.status.value, state.reason) != last_status:
            last_status = (state.status.value, state.reason)
            yield sse("status", json.dumps({"status": state.status.value, "reason": state.reason}))
        for attempt in state.attempts:
            if attempt.number <= shown or not attempt.launched:
                continue
            yield sse(
                "attempt", json.dumps({"number": attempt.number, "cluster": attempt.cluster_name})
            )

            def running(number: int = attempt.number) -> bool:
                current = snapshot().attempts
                return any(a.number == number and a.status in LIVE for a in current)

            async for chunk in _attempt_chunks(attempt, clusters, running):
                yield sse("log", chunk)
            shown = attempt.number
            idle = 0.0
            break  # re-read the job: more attempts or the end may have come
        else:
            if state.status in TERMINAL_STATUSES:
                yield sse("end", json.dumps({"status": state.status.value, "reason": state.reason}))
                return
            await asyncio.sleep(POLL_SECONDS)
            idle += POLL_SECONDS
            if idle >= KEEPALIVE_SECONDS:
                idle = 0.0
                yield b": keep-alive\n\n"


async def _attempt_chunks(
    attempt: AttemptLog, clusters: RayClusters, still_running: Callable[[], bool]
) -> AsyncIterator[str]:
    """Whole lines of an attempt's log, streamed while its Ray job runs.

    Ray's stream lingers a few seconds after the job ends, so every second
    without new output the attempt's status is checked in the database; once
    it has ended, the rest is read from the full log instead."""
    sent = 0
    if attempt.status in (AttemptStatus.SUBMITTED, AttemptStatus.RUNNING) and (
        attempt.cluster_address
    ):
        chunks: asyncio.Queue[str | BaseException | None] = asyncio.Queue()
        cluster = clusters.get(attempt.cluster_address)

        async def pump() -> None:
            try:
                async for chunk in cluster.follow_logs(attempt.attempt_id):
                    await chunks.put(chunk)
                await chunks.put(None)
            except Exception as exc:  # the cluster went away mid-stream
                await chunks.put(exc)

        reader = asyncio.create_task(pump())
        pending = ""
        try:
            while True:
                try:
                    item = await asyncio.wait_for(chunks.get(), timeout=POLL_SECONDS)
                except TimeoutError:
                    if await to_thread.run_sync(still_running):
                        continue
                    break  # ended; the rest comes from the full log below
                if item is None:
                    if pending:
                        yield pending
                    return
                if isinstance(item, BaseException):
                    break
                pending += item
                complete, _, pending = pending.rpartition("\n")
                if complete:
                    sent += len(complete) + 1
                    yield complete
        finally:
            reader.cancel()
    text = await to_thread.run_sync(read_attempt_log, attempt, clusters)
    rest = text[sent:].rstrip("\n") if text else ""
    if rest:
        yield rest
