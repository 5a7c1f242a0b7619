"""The skeleton of a leased loop, shared by the scheduler and the tracking loop.

A pass claims the rows that are due under a fresh lease token (one short
transaction), does the slow part of each in a thread pool with no transaction
open, then applies each result in its own transaction. The apply checks the
lease token, so a result whose lease another loop took over meanwhile is
dropped instead of written over that loop's work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from sqlalchemy.orm import Session, sessionmaker

log = logging.getLogger(__name__)

WorkT = TypeVar("WorkT")
ResultT = TypeVar("ResultT")
AppliedT = TypeVar("AppliedT")


@dataclass(frozen=True)
class LoopSettings:
    """How much one pass of a leased loop takes on (from ``config.Settings``)."""

    batch: int  # rows claimed per pass
    threads: int  # rows worked on at once
    lease_seconds: float  # how long a claimed row is this loop's


@dataclass(frozen=True)
class Done(Generic[WorkT, AppliedT]):
    """One row of a pass: what was claimed and what its apply returned
    (None: nothing was applied, the lease was lost or the work failed)."""

    work: WorkT
    applied: AppliedT | None


class Pipeline(Generic[WorkT, ResultT, AppliedT]):
    """Claim, work in a pool, apply: the parts are the loop's own.

    ``claim(session, settings)`` returns the leased rows; ``work(row)`` runs
    in the pool; ``apply(session, row, result)`` returns None when the lease
    is no longer held. ``failed(row, exc)`` turns a bug in ``work`` into a
    result to apply, or None to apply nothing and let the lease run out.
    ``describe(row)`` names a row in log lines; ``log_extra(row)`` adds
    structured fields to them.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        settings: LoopSettings,
        *,
        name: str,
        claim: Callable[[Session, LoopSettings], Sequence[WorkT]],
        work: Callable[[WorkT], ResultT],
        apply: Callable[[Session, WorkT, ResultT], AppliedT | None],
        describe: Callable[[WorkT], str],
        failed: Callable[[WorkT, Exception], ResultT | None] = lambda work, exc: None,
        log_extra: Callable[[WorkT], dict[str, str]] = lambda work: {},
    ) -> None:
        self.sessions = sessions
        self.settings = settings
        self._claim, self._work, self._apply = claim, work, apply
        self._failed, self._describe, self._extra = failed, describe, log_extra
        self.pool = ThreadPoolExecutor(
            max_workers=settings.threads, thread_name_prefix=f"trainplane-{name}"
        )

    def run_once(self) -> list[Done[WorkT, AppliedT]]:
        """One pass; what each claimed row came to, in claim order."""
        with self.sessions() as session:
            works = list(self._claim(session, self.settings))
        futures = [self.pool.submit(self._work, work) for work in works]
        done = []
        for work, future in zip(works, futures, strict=True):
            done.append(Done(work, self._finish(work, future.result)))
        return done

    def _finish(self, work: WorkT, result_of: Callable[[], ResultT]) -> AppliedT | None:
        extra = self._extra(work)
        try:
            result = result_of()
        except Exception as exc:  # a bug in one row's handling must not stop the others
            log.exception("working on %s failed", self._describe(work), extra=extra)
            failed = self._failed(work, exc)
            if failed is None:
                return None
            result = failed
        with self.sessions() as session:
            applied = self._apply(session, work, result)
        if applied is None:
            log.warning("lease on %s was lost; result dropped", self._describe(work), extra=extra)
        return applied

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
