"""The tracking loop: keeps every job's MLflow run up with the job.

A pass claims due ``job_tracking`` rows (``services.tracking``), and for each
job, with no transaction open: creates its run on first sight (finding the one
an interrupted pass created, by its job id tag), writes the metric points
reported since the last pass and the attempts' tags, and once the job has
ended and every point is in, registers its model (on success) and closes the
run. What got done is applied while the lease holds; a failure is recorded on
the job and the pass is tried again later. Nothing here ever fails a job.

A sweep's run is the parent of its trials' runs (``tracking.sweep_run``): a
trial's run is opened only once the sweep's exists, nested under it. A trial
never registers its model; the sweep that succeeded registers its best trial's.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from trainplane import __version__
from trainplane.config import Settings
from trainplane.db.base import utcnow
from trainplane.jobs.environment import redacted_spec
from trainplane.jobs.states import JobStatus
from trainplane.jobs.usage import AttemptSpan, cost, gpu_hours, lost_gpu_hours
from trainplane.scheduler.pipeline import LoopSettings, Pipeline
from trainplane.services import names
from trainplane.services import tracking as tracking_service
from trainplane.services.names import NameUse
from trainplane.services.tracking import SyncResult, TrackingWork
from trainplane.storage.backends import StorageError
from trainplane.tracking.client import MetricValue, MlflowTracking, TrackingError, tracking_config
from trainplane.tracking.registry import ModelUnavailable, Registration, register
from trainplane.tracking.run_data import (
    RUN_STATUS,
    TAG,
    attempt_tags,
    attempts_signature,
    experiment_name,
    key,
    run_params,
    run_tags,
)
from trainplane.tracking.sweep_run import (
    PARENT_TAG,
    best_metric,
    sweep_params,
    sweep_signature,
    sweep_tags,
)

log = logging.getLogger(__name__)

POINTS_PER_PASS = 5000


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class LeaseKeeper:
    """Keeps the lease of a claimed job while a long call runs (a model upload
    can outlast any fixed lease), so no other scheduler takes the job
    meanwhile; ``held()`` renews it once more and says whether it still is ours."""

    def __init__(
        self, sessions: sessionmaker[Session], work: TrackingWork, lease_seconds: float
    ) -> None:
        self.sessions = sessions
        self.work = work
        self.lease_seconds = lease_seconds
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._keep, name="trainplane-lease", daemon=True)

    def held(self) -> bool:
        try:
            until = utcnow() + timedelta(seconds=self.lease_seconds)
            with self.sessions() as session:
                return tracking_service.renew_lease(session, self.work, until)
        except Exception:  # the database is away: the lease cannot be vouched for
            log.exception("renewing the tracking lease of job %s failed", self.work.job_id)
            return False

    def _keep(self) -> None:
        while not self._done.wait(self.lease_seconds / 3):
            if not self.held():
                return

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


# Claims a name for the job's project if no one owns it; returns its owner's id.
NameClaim = Callable[[NameUse], str]


def name_claimer(sessions: sessionmaker[Session], project_id: str) -> NameClaim:
    def claim(use: NameUse) -> str:
        with sessions() as session:
            return names.claim_name(session, use, project_id)

    return claim


def name_refusal(
    work: TrackingWork, mlflow: MlflowTracking, use: NameUse, owner: str | None, claim: NameClaim
) -> str | None:
    """Why the job may not write to the experiment or model ``use``, or None.
    A name no one owns yet (one that predates ownership) is checked against
    what MLflow says (trainplane's project tags on runs and versions) before
    the job's project claims it."""
    if owner is None:
        foreign = (
            mlflow.has_runs_of_other_projects(use.name, work.project)
            if use.kind == names.EXPERIMENT
            else mlflow.has_versions_of_other_projects(use.name, work.project)
        )
        if not foreign:
            owner = claim(use)
    if owner == work.project_id:
        return None
    return f"nothing written to MLflow: {names.refusal(use, work.project)}"


def sync(
    work: TrackingWork,
    mlflow: MlflowTracking,
    now: datetime,
    *,
    api_url: str | None,
    keep_lease: Callable[[], LeaseKeeper],
    claim_name: NameClaim,
) -> SyncResult:
    """One pass over one job. Never raises for MLflow's or the storage's
    failures: they come back as ``error``, with whatever got done before."""
    result = SyncResult()
    job_url = f"{api_url.rstrip('/')}/v1/jobs/{work.job_id}" if api_url else None
    experiment = NameUse(names.EXPERIMENT, experiment_name(work.spec, work.project))
    try:
        refused = name_refusal(work, mlflow, experiment, work.experiment_owner, claim_name)
        if refused is not None:
            # For good: another project's experiment stays another's. The
            # job's tracking ends here, with the reason as its error.
            result.error, result.finished = refused, True
            return result
        if work.parent_id and not work.run_id and not work.parent_run_id:
            if work.parent_gave_up:
                result.error, result.finished = f"nothing written to MLflow: {NO_PARENT}", True
            # Else the sweep's run is not made yet: due again after the interval.
            return result
        run_id = work.run_id or _open_run(work, mlflow, result, job_url)
        if work.points:
            metrics = [
                MetricValue(key(name), value, _ms(point.recorded_at), point.step)
                for point in work.points
                for name, value in point.values.items()
            ]
            mlflow.log(run_id, metrics=metrics)
            result.synced_metric_id = work.points[-1].id
        signature = _signature(work)
        if signature != work.synced_attempts:
            _log_progress(work, mlflow, run_id, now)
            result.synced_attempts = signature
        if work.sweep is not None and work.sweep.settled and not work.ended:
            # Registered before the sweep ends: its SUCCEEDED waits for the
            # model (services.sweep_registration).
            result.error = _register_wanted(
                work, mlflow, run_id, result, job_url, keep_lease, claim_name
            )
        if work.can_finish:
            _finish(work, mlflow, run_id, result, now, job_url, keep_lease, claim_name)
    except (TrackingError, StorageError) as exc:
        result.error = str(exc)
    return result


NO_PARENT = "the trial's sweep has no MLflow run to nest the trial's run under"


def _signature(work: TrackingWork) -> str:
    return sweep_signature(work.sweep) if work.sweep else attempts_signature(work.attempts)


def _log_progress(work: TrackingWork, mlflow: MlflowTracking, run_id: str, now: datetime) -> None:
    """The attempts' tags of a job; the trial counts and best objective of a sweep."""
    sweep = work.sweep
    if sweep is None:
        mlflow.log(run_id, tags=attempt_tags(work.attempts))
        return
    metrics = []
    if sweep.best_value is not None:
        metrics = [MetricValue(best_metric(sweep), sweep.best_value, _ms(now), sweep.ended)]
    mlflow.log(run_id, tags=sweep_tags(sweep), metrics=metrics)


def _open_run(
    work: TrackingWork, mlflow: MlflowTracking, result: SyncResult, job_url: str | None
) -> str:
    experiment_id = work.experiment_id or mlflow.experiment(
        experiment_name(work.spec, work.project)
    )
    run_id = mlflow.find_run(experiment_id, work.job_id)
    if run_id is None:
        started = work.attempts[0].created_at if work.attempts else work.created_at
        tags = run_tags(
            job_id=work.job_id,
            project=work.project,
            kind=work.kind,
            submitted_by=work.submitted_by,
            spec=work.spec,
            version=__version__,
            job_url=job_url,
        )
        if work.parent_run_id:
            tags[PARENT_TAG] = work.parent_run_id
        run_id = mlflow.create_run(
            experiment_id, name=work.name, start_time_ms=_ms(started), tags=tags
        )
    params = sweep_params(work.spec) if work.sweep else run_params(work.spec, work.attempts)
    mlflow.log(run_id, params=params)
    # entrypoint.env with its values hidden, as in the parameters.
    spec_document = json.dumps(redacted_spec(work.spec), indent=2)
    mlflow.log_document(run_id, spec_document, "trainplane/spec.json")
    result.experiment_id, result.run_id = experiment_id, run_id
    result.run_url = mlflow.run_url(experiment_id, run_id)
    return run_id


def _register_wanted(
    work: TrackingWork,
    mlflow: MlflowTracking,
    run_id: str,
    result: SyncResult,
    job_url: str | None,
    keep_lease: Callable[[], LeaseKeeper],
    claim_name: NameClaim,
) -> str | None:
    """Register the model the spec asks for, unless it is already; why it
    cannot be, if it cannot."""
    # A trial's spec names the sweep's model only so that its runtime exports it.
    wanted = work.spec.get("register_model") if work.parent_id is None else None
    if not wanted or work.model_version is not None or result.model_version is not None:
        return None
    refused = name_refusal(
        work, mlflow, NameUse(names.MODEL, wanted["name"]), work.model_owner, claim_name
    )
    if refused is not None:
        return refused
    # A sweep logs its best trial's model to its own run: the version names that trial.
    job_id = work.sweep.best_trial_id if work.sweep else work.job_id
    if not job_id:
        return "nothing registered: no trial reported the objective"
    registration = Registration(
        name=wanted["name"],
        alias=wanted.get("alias"),
        run_id=run_id,
        model_root=work.model_root,
        job_id=job_id,
        project=work.project,
        job_url=job_url if job_id == work.job_id else None,
    )
    try:
        with keep_lease() as lease:
            result.model_version = register(mlflow, registration, still_ours=lease.held)
        result.model_name = registration.name
    except ModelUnavailable as exc:
        return str(exc)  # the run still closes; the job shows why
    return None


def _finish(
    work: TrackingWork,
    mlflow: MlflowTracking,
    run_id: str,
    result: SyncResult,
    now: datetime,
    job_url: str | None,
    keep_lease: Callable[[], LeaseKeeper],
    claim_name: NameClaim,
) -> None:
    unavailable = None
    if work.status is JobStatus.SUCCEEDED:
        unavailable = _register_wanted(
            work, mlflow, run_id, result, job_url, keep_lease, claim_name
        )
    end = work.finished_at or now
    spans = [
        AttemptSpan(a.gpus, a.started_at, a.finished_at, a.price_per_gpu_hour)
        for a in work.attempts
    ]
    used = (gpu_hours(spans, end), cost(spans, end), lost_gpu_hours(spans, end))
    if work.sweep:  # no attempts of its own: its trials'
        used = (work.sweep.gpu_hours, work.sweep.cost, work.sweep.lost_gpu_hours)
    mlflow.log(
        run_id,
        metrics=[
            MetricValue(f"{TAG}{name}", value, _ms(end), 0)
            for name, value in zip(("gpu_hours", "cost", "lost_gpu_hours"), used, strict=True)
        ],
        tags={
            **({} if work.sweep else attempt_tags(work.attempts)),
            f"{TAG}status": work.status.value,
        },
    )
    events = "".join(
        json.dumps(
            {
                "time": e.created_at.isoformat(),
                "from": e.from_status,
                "to": e.to_status,
                "reason": e.reason,
                "actor": e.actor,
            }
        )
        + "\n"
        for e in work.events
    )
    mlflow.log_document(run_id, events, "trainplane/events.jsonl")
    mlflow.finish(run_id, RUN_STATUS[work.status], _ms(end))
    result.finished = True
    result.synced_attempts = _signature(work)
    result.error = unavailable


class TrackingLoop:
    """Runs passes in a background thread until stopped."""

    def __init__(self, settings: Settings, sessions: sessionmaker[Session]) -> None:
        self.settings = settings
        self.sessions = sessions
        self.mlflow = MlflowTracking(tracking_config(settings))
        # The lease is renewed while a model uploads (LeaseKeeper).
        self.pipeline: Pipeline[TrackingWork, SyncResult, bool] = Pipeline(
            sessions,
            LoopSettings(
                settings.tracking_batch, settings.tracking_threads, settings.tracking_lease_seconds
            ),
            name="mlflow",
            claim=self._claim,
            work=self._sync,
            apply=self._apply,
            describe=lambda work: f"the tracking of job {work.job_id}",
            failed=lambda work, exc: SyncResult(
                error=f"internal error: {type(exc).__name__}: {exc}"
            ),
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> int:
        """One pass; returns how many jobs it looked at."""
        return len(self.pipeline.run_once())

    def _claim(self, session: Session, loop: LoopSettings) -> list[TrackingWork]:
        return tracking_service.claim_tracking(
            session,
            utcnow(),
            lease_seconds=loop.lease_seconds,
            limit=loop.batch,
            points_per_pass=POINTS_PER_PASS,
            default_storage=self.settings.resolved_checkpoint_storage,
        )

    def _sync(self, work: TrackingWork) -> SyncResult:
        return sync(
            work,
            self.mlflow,
            utcnow(),
            api_url=self.settings.advertise_url,
            keep_lease=functools.partial(
                LeaseKeeper, self.sessions, work, self.pipeline.settings.lease_seconds
            ),
            claim_name=name_claimer(self.sessions, work.project_id),
        )

    def _apply(self, session: Session, work: TrackingWork, result: SyncResult) -> bool | None:
        if result.error:
            log.warning("tracking job %s: %s", work.job_id, result.error)
        applied = tracking_service.apply_sync(
            session,
            work,
            result,
            utcnow(),
            interval_seconds=self.settings.tracking_interval_seconds,
            max_backoff_seconds=self.settings.tracking_max_backoff_seconds,
        )
        if applied and result.model_version:
            log.info(
                "job %s: registered %s version %s",
                work.job_id,
                result.model_name,
                result.model_version,
            )
        return applied or None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="trainplane-tracking", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        period = min(1.0, self.settings.tracking_interval_seconds)
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:
                # The database may be restarting; the next pass tries again.
                log.exception("tracking pass failed")
            self._stop.wait(period)

    def stop(self, timeout: float = 10) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.pipeline.shutdown()
