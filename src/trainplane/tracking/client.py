"""The MLflow calls trainplane makes, behind one small class.

Every failure of MLflow (unreachable, refusing, a broken local store) comes out
as :class:`TrackingError` with a message naming the store, so callers record it
and try again later instead of failing anything. mlflow is imported when a
:class:`MlflowTracking` is first used, never when trainplane is.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from trainplane.config import Settings

T = TypeVar("T")

# One log_batch call takes at most 1000 metrics and 100 params or tags.
METRICS_PER_CALL = 1000
PARAMS_PER_CALL = 100
# The client's own retries (7, doubling from 2 s) would block a tracking pass
# for minutes while the server is down; trainplane retries whole passes with
# its own backoff. The request timeout stays MLflow's: model uploads are long.
CLIENT_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
}
_SLUG = re.compile(r"[^A-Za-z0-9_.-]+")


class TrackingError(Exception):
    """MLflow did not do what was asked; the message says which store and why."""


@dataclass(frozen=True)
class TrackingConfig:
    tracking_uri: str
    registry_uri: str
    # Where experiments trainplane creates keep their artifacts, for stores
    # that are a database or a folder (a server decides for itself).
    artifact_root: str | None
    ui_url: str | None  # where people open runs; None: no links


def tracking_config(settings: Settings) -> TrackingConfig:
    return TrackingConfig(
        tracking_uri=settings.resolved_tracking_uri,
        registry_uri=settings.resolved_registry_uri,
        artifact_root=settings.resolved_mlflow_artifacts,
        ui_url=settings.resolved_mlflow_ui_url,
    )


@dataclass(frozen=True)
class MetricValue:
    key: str
    value: float
    timestamp_ms: int
    step: int


@dataclass(frozen=True)
class VersionInfo:
    name: str
    version: str
    run_id: str | None
    source: str
    status: str
    aliases: tuple[str, ...]
    tags: dict[str, str]
    created_at_ms: int | None


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://", "databricks"))


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _wrapped(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def call(self: MlflowTracking, *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, *args, **kwargs)
        except TrackingError:
            raise
        except Exception as exc:  # whatever MLflow, requests or a store raise
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise TrackingError(
                f"MLflow at {self.config.tracking_uri}: {type(exc).__name__}: {message[:500]}"
            ) from exc

    return call


class MlflowTracking:
    def __init__(self, config: TrackingConfig) -> None:
        self.config = config
        self._client: Any = None
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                for name, value in CLIENT_DEFAULTS.items():
                    os.environ.setdefault(name, value)
                from mlflow import MlflowClient

                self._client = MlflowClient(
                    tracking_uri=self.config.tracking_uri, registry_uri=self.config.registry_uri
                )
            return self._client

    def run_url(self, experiment_id: str, run_id: str) -> str | None:
        from trainplane.tracking.run_data import run_url

        return run_url(self.config.ui_url, experiment_id, run_id)

    # --- runs ------------------------------------------------------------------------
    @_wrapped
    def experiment(self, name: str) -> str:
        """The id of the experiment called ``name``, created if need be."""
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(name)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                raise TrackingError(
                    f"MLflow experiment '{name}' is deleted; restore it or set tracking.experiment"
                )
            return found.experiment_id
        location = None
        if self.config.artifact_root and not is_server(self.config.tracking_uri):
            slug = _SLUG.sub("-", name).strip("-") or "experiment"
            location = f"{self.config.artifact_root.rstrip('/')}/{slug}"
        try:
            return self.client.create_experiment(name, artifact_location=location)
        except MlflowException:
            found = self.client.get_experiment_by_name(name)  # created meanwhile by another
            if found is None:
                raise
            return found.experiment_id

    @_wrapped
    def find_run(self, experiment_id: str, job_id: str) -> str | None:
        """The run tagged with ``job_id``: one created by a pass that crashed
        before it could record it."""
        runs = self.client.search_runs(
            [experiment_id], filter_string=f"tags.`trainplane.job_id` = '{job_id}'", max_results=1
        )
        return runs[0].info.run_id if runs else None

    @_wrapped
    def has_runs_of_other_projects(self, experiment: str, project: str) -> bool:
        """Whether experiment ``experiment`` holds a run trainplane made for
        a project other than ``project`` (deleted runs count too)."""
        from mlflow.entities import ViewType

        found = self.client.get_experiment_by_name(experiment)
        if found is None:
            return False
        runs = self.client.search_runs(
            [found.experiment_id],
            filter_string=f"tags.`trainplane.project` != '{project}'",
            run_view_type=ViewType.ALL,
            max_results=1,
        )
        return bool(runs)

    @_wrapped
    def create_run(
        self, experiment_id: str, *, name: str, start_time_ms: int, tags: dict[str, str]
    ) -> str:
        run = self.client.create_run(
            experiment_id, start_time=start_time_ms, tags=tags, run_name=name
        )
        return run.info.run_id

    @_wrapped
    def log(
        self,
        run_id: str,
        *,
        params: dict[str, str] | None = None,
        tags: dict[str, str] | None = None,
        metrics: Sequence[MetricValue] = (),
    ) -> None:
        from mlflow.entities import Metric, Param, RunTag

        for chunk in _chunks([Param(k, v) for k, v in (params or {}).items()], PARAMS_PER_CALL):
            self.client.log_batch(run_id, params=chunk, synchronous=True)
        for chunk in _chunks([RunTag(k, v) for k, v in (tags or {}).items()], PARAMS_PER_CALL):
            self.client.log_batch(run_id, tags=chunk, synchronous=True)
        values = [Metric(m.key, m.value, m.timestamp_ms, m.step) for m in metrics]
        for chunk in _chunks(values, METRICS_PER_CALL):
            self.client.log_batch(run_id, metrics=chunk, synchronous=True)

    @_wrapped
    def log_document(self, run_id: str, text: str, path: str) -> None:
        self.client.log_text(run_id, text, path)

    @_wrapped
    def log_folder(self, run_id: str, folder: str, path: str) -> None:
        self.client.log_artifacts(run_id, folder, path)

    @_wrapped
    def log_file(self, run_id: str, file: str, path: str) -> None:
        self.client.log_artifact(run_id, file, path)

    @_wrapped
    def finish(self, run_id: str, status: str, end_time_ms: int | None) -> None:
        self.client.set_terminated(run_id, status=status, end_time=end_time_ms)

    # --- the registry ----------------------------------------------------------------
    @_wrapped
    def version_of_run(self, name: str, run_id: str) -> str | None:
        """The version of model ``name`` made from ``run_id``, if there is one."""
        found = self.client.search_model_versions(f"name = '{name}' and run_id = '{run_id}'")
        return min((v.version for v in found), key=int) if found else None

    @_wrapped
    def create_version(
        self, name: str, *, source: str, run_id: str, tags: dict[str, str], description: str
    ) -> str:
        from mlflow.exceptions import MlflowException

        try:
            self.client.create_registered_model(name)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        version = self.client.create_model_version(
            name,
            source=source,
            run_id=run_id,
            tags=tags,
            description=description,
            await_creation_for=60,
        )
        return str(version.version)

    @_wrapped
    def has_versions_of_other_projects(self, name: str, project: str) -> bool:
        """Whether model ``name`` has a version trainplane registered for a
        project other than ``project``."""
        versions = self.client.search_model_versions(f"name = '{name}'")
        return any((v.tags or {}).get("trainplane.project", project) != project for v in versions)

    @_wrapped
    def set_alias(self, name: str, alias: str, version: str) -> None:
        self.client.set_registered_model_alias(name, alias, version)

    @_wrapped
    def versions(self, names: Sequence[str], *, per_model: int) -> dict[str, list[VersionInfo]]:
        """The newest ``per_model`` versions of each model, newest first."""
        from mlflow.exceptions import MlflowException

        found: dict[str, list[VersionInfo]] = {}
        for name in names:
            try:
                # Searches leave aliases out; the model has them all.
                aliases = self.client.get_registered_model(name).aliases or {}
            except MlflowException as exc:
                if exc.error_code == "RESOURCE_DOES_NOT_EXIST":  # deleted in MLflow
                    found[name] = []
                    continue
                raise
            by_version: dict[str, list[str]] = {}
            for alias, version in sorted(aliases.items()):
                by_version.setdefault(str(version), []).append(alias)
            versions = self.client.search_model_versions(
                f"name = '{name}'", max_results=per_model, order_by=["version_number DESC"]
            )
            found[name] = [
                VersionInfo(
                    name=v.name,
                    version=str(v.version),
                    run_id=v.run_id or None,
                    source=v.source,
                    status=str(v.status),
                    aliases=tuple(by_version.get(str(v.version), ())),
                    tags=dict(v.tags or {}),
                    created_at_ms=v.creation_timestamp,
                )
                for v in versions
            ]
        return found
