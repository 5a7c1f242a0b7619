"""The scheduler's loop: each iteration re-queues restarts whose backoff is over,
advances sweeps (their new trials are queued jobs), checks cluster health, asks
for preemptions (when enabled), places queued jobs, then advances every attempt
that is due (launch, watch, stop) with the cluster calls spread over a thread
pool."""

from __future__ import annotations

import logging
import math
import threading
import time
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from trainplane import wakeup
from trainplane.backends.ray import RayClusters, probe
from trainplane.config import Settings
from trainplane.db.base import utcnow
from trainplane.db.models import Cluster
from trainplane.observability.instruments import QUEUE_WAIT_SECONDS, SCHEDULER_PASS_SECONDS
from trainplane.scheduler.code import BUNDLE_CACHE_IDLE, BundleFolders, bundle_cache_dir
from trainplane.scheduler.pipeline import LoopSettings, Pipeline
from trainplane.scheduler.steps import AdvanceContext, advance
from trainplane.services import attempts as attempt_service
from trainplane.services import bundles as bundle_service
from trainplane.services import clusters as cluster_service
from trainplane.services.attempt_tokens import TokenKey
from trainplane.services.attempts import Applied, AttemptWork, Outcome
from trainplane.services.entry_levels import decide_entry_levels
from trainplane.services.file_access import FileAccess
from trainplane.services.placement import place_queued_jobs
from trainplane.services.preemption import preempt_for_waiting_jobs
from trainplane.services.sweep_controller import advance_sweeps
from trainplane.services.wait_bounds import estimate_fifo_waits

log = logging.getLogger(__name__)

MIN_PASS_SECONDS = 0.1
HOUSEKEEPING_SECONDS = 1.0
# Deleting unused code bundles is a matter of days: once in a while will do.
BUNDLE_SWEEP_SECONDS = 600.0


class Scheduler:
    def __init__(
        self, settings: Settings, sessions: sessionmaker[Session], *, local_user: bool = False
    ) -> None:
        """``local_user``: ``trainplane up`` on loopback, whose one local user's
        folders may be shipped (services.file_access)."""
        self.settings = settings
        self.sessions = sessions
        self.file_access = FileAccess.from_settings(settings, local_user=local_user)
        self.clusters = RayClusters()
        self.token_key = TokenKey(settings.secret_key)
        self.bundles = BundleFolders(sessions, bundle_cache_dir(settings))
        self._context: AdvanceContext | None = None
        self.pipeline: Pipeline[AttemptWork, Outcome, Applied] = Pipeline(
            sessions,
            LoopSettings(
                settings.scheduler_batch,
                settings.scheduler_threads,
                settings.scheduler_lease_seconds,
            ),
            name="attempt",
            claim=self._claim,
            work=self._advance,
            apply=self._apply,
            describe=lambda work: f"attempt {work.attempt_id}",
            log_extra=_ids,
        )
        self.pool = self.pipeline.pool  # cluster probes share it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_housekeeping = -math.inf
        self._last_bundle_sweep = -math.inf

    # --- one iteration, in the order that keeps latency low ------------------------

    def run_once(self) -> None:
        # Backoffs and cluster probes work in seconds: no need to look at them
        # on every pass of a loop that submissions wake many times a second.
        if time.monotonic() - self._last_housekeeping >= HOUSEKEEPING_SECONDS:
            self._last_housekeeping = time.monotonic()
            with SCHEDULER_PASS_SECONDS.labels("housekeeping").time():
                with self.sessions() as session:
                    attempt_service.requeue_restarts(session, utcnow())
                with self.sessions() as session, session.begin():
                    rules = self.settings.service_rules()
                    decide_entry_levels(session, utcnow(), rules)
                    estimate_fifo_waits(session, utcnow(), rules)
                self.advance_sweeps()
                self.check_clusters()
                self.preempt()
        if time.monotonic() - self._last_bundle_sweep >= BUNDLE_SWEEP_SECONDS:
            self._last_bundle_sweep = time.monotonic()
            self.sweep_bundles()
        settings = self.settings
        preempting = settings.preemption_enabled or settings.service_preemption_enabled
        grace = settings.preemption_grace_seconds if preempting else None
        with SCHEDULER_PASS_SECONDS.labels("placement").time(), self.sessions() as session:
            result = place_queued_jobs(
                session, utcnow(), preemption_grace_seconds=grace, rules=settings.service_rules()
            )
        for wait in result.first_waits:
            QUEUE_WAIT_SECONDS.observe(wait)
        for job_id, attempt_id in result.placed:
            log.info("placed job %s", job_id, extra={"job_id": job_id, "attempt_id": attempt_id})
        with SCHEDULER_PASS_SECONDS.labels("advance").time():
            self.advance_attempts()

    def advance_sweeps(self) -> None:
        """Sweeps start, get new trials (placed in this same pass) and end."""
        with self.sessions() as session:
            changes = advance_sweeps(session, utcnow(), tracking=self.settings.tracking_enabled)
            for change in changes:
                log.info("%s", change)

    def preempt(self) -> None:
        """Ask low-priority attempts to make room for waiting high-priority
        jobs, and jobs of more attained service for those of less, when the
        server allows preemption."""
        settings = self.settings
        if not (settings.preemption_enabled or settings.service_preemption_enabled):
            return
        with self.sessions() as session:
            asked = preempt_for_waiting_jobs(
                session,
                utcnow(),
                grace_seconds=settings.preemption_grace_seconds,
                min_runtime_seconds=settings.preemption_min_runtime_seconds,
                priorities=settings.preemption_enabled,
                rules=settings.service_rules(),
            )
        for item in asked:
            log.info(
                "job %s preempts job %s on cluster %s",
                item.preemptor_job,
                item.victim_job,
                item.cluster,
                extra={"job_id": item.victim_job},
            )

    def advance_attempts(self) -> None:
        for done in self.pipeline.run_once():
            work, applied = done.work, done.applied
            if applied is None:
                continue
            ids = _ids(work)
            if applied.job_status is not None:
                log.info("job %s -> %s", work.job_id, applied.job_status, extra=ids)
            for note in applied.notes:
                log.info("attempt %s: %s", work.attempt_id, note, extra=ids)

    def _claim(self, session: Session, loop: LoopSettings) -> list[AttemptWork]:
        works = attempt_service.claim_attempts(
            session, utcnow(), lease_seconds=loop.lease_seconds, limit=loop.batch
        )
        if works and self._context is None:
            # The same for every attempt and every pass; built here, on the
            # loop's thread, because the token key may need the database.
            settings = self.settings
            self._context = AdvanceContext(
                control_plane_url=settings.advertise_url,
                checkpoint_storage=settings.resolved_checkpoint_storage,
                stuck_after_seconds=settings.stuck_after_seconds,
                preemption_grace_seconds=settings.preemption_grace_seconds,
                token_key=self.token_key.get(session),
                file_access=self.file_access,
                bundles=self.bundles,
                rank_pool_idle_seconds=settings.rank_pool_idle_seconds,
            )
        return works

    def _advance(self, work: AttemptWork) -> Outcome:
        assert self._context is not None  # _claim built it before any work was handed out
        outcome = advance(work, self.clusters, utcnow(), context=self._context)
        log.debug("attempt %s (%s): %s", work.attempt_id, work.status, outcome, extra=_ids(work))
        return outcome

    def _apply(self, session: Session, work: AttemptWork, outcome: Outcome) -> Applied | None:
        settings = self.settings
        return attempt_service.apply_outcome(
            session,
            work,
            outcome,
            utcnow(),
            poll_seconds=settings.scheduler_poll_seconds,
            starting_poll_seconds=settings.scheduler_starting_poll_seconds,
            lost_after_seconds=settings.cluster_lost_after_seconds,
        )

    def sweep_bundles(self) -> None:
        """Deletes the code bundles nothing needs any more, and the unpacked
        copies this scheduler has not launched from for a while."""
        retention = timedelta(days=self.settings.bundle_retention_days)
        with self.sessions() as session:
            deleted = bundle_service.delete_unused_bundles(session, utcnow(), retention)
        pruned = self.bundles.prune(idle_for=min(retention, BUNDLE_CACHE_IDLE))
        if deleted or pruned:
            log.info("deleted %d unused code bundles, %d unpacked copies", deleted, pruned)

    def check_clusters(self) -> None:
        """Probe clusters not checked recently; placement uses only READY ones."""
        stale_before = utcnow() - timedelta(seconds=self.settings.cluster_probe_seconds)
        with self.sessions() as session, session.begin():
            due = [
                (c.id, c.address)
                for c in session.scalars(select(Cluster))
                if c.checked_at is None or c.checked_at < stale_before
            ]
        # In parallel: each silent cluster costs a probe timeout.
        results = self.pool.map(lambda item: (item[0], *probe(item[1])), due)
        for cluster_id, ready, message in results:
            with self.sessions() as session:
                cluster_service.record_health(session, cluster_id, ready=ready, message=message)

    # --- running in the background ---------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="trainplane-scheduler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.run_once()
            except Exception:
                # The database may be restarting; the next iteration tries again.
                log.exception("scheduler iteration failed")
            elapsed = time.monotonic() - started
            wakeup.wait_for_work(max(0.0, self.settings.scheduler_interval_seconds - elapsed))
            # A burst of submissions wakes the loop once per pass, not once each.
            self._stop.wait(max(0.0, MIN_PASS_SECONDS - (time.monotonic() - started)))

    def stop(self, timeout: float = 10) -> None:
        self._stop.set()
        wakeup.work_available()
        if self._thread is not None:
            self._thread.join(timeout)
        self.pipeline.shutdown()


def _ids(work: AttemptWork) -> dict[str, str]:
    return {"job_id": work.job_id, "attempt_id": work.attempt_id}
