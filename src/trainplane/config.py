"""Settings of the control plane, read from ``TRAINPLANE_*`` environment variables.

Nothing here is read at import time: callers build a :class:`Settings` when they
build an app, a CLI command or a scheduler, so tests and replicas can each have
their own.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlparse

from pydantic import AliasChoices, Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from trainplane.jobs.service_queues import ServiceRules

# Values people paste from examples. A bootstrap token is an admin credential, so
# refuse them rather than start a server anyone can guess their way into.
_WEAK_SECRETS = frozenset({"changeme", "change-me", "secret", "password", "admin", "token", "test"})
MIN_SECRET_LENGTH = 16


def _default_home() -> Path:
    return Path.home() / ".trainplane"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="TRAINPLANE_", extra="ignore", populate_by_name=True
    )

    home: Path = Field(default_factory=_default_home, description="Embedded state folder.")
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL; default is a SQLite file under `home`.",
    )
    auto_migrate: bool | None = Field(
        default=None,
        description="Upgrade the schema when the server starts. Default: only for SQLite.",
    )
    bootstrap_token: SecretStr | None = None
    secret_key: SecretStr | None = Field(
        default=None,
        description="Key that attempt tokens are derived from. Default: a random key "
        "generated once and kept in the database, so every replica agrees.",
    )
    metrics_token: SecretStr | None = Field(
        default=None,
        description="When set, /metrics asks for `Authorization: Bearer <this>` "
        "(Prometheus' `authorization` scrape setting). Unset: open, like the health probes.",
    )
    log_format: Literal["text", "json"] = Field(
        default="text", description="Server logs: readable lines, or one JSON object per line."
    )
    db_pool_size: int = Field(default=10, ge=1)
    db_statement_timeout_ms: int = Field(default=15_000, ge=100)

    # Scheduler.
    scheduler_interval_seconds: float = Field(default=0.5, gt=0, description="Loop period.")
    scheduler_poll_seconds: float = Field(
        default=2.0, gt=0, description="How often a running attempt's Ray job is looked at."
    )
    scheduler_starting_poll_seconds: float = Field(
        default=0.25, gt=0, description="How often an attempt on its way up is looked at."
    )
    scheduler_lease_seconds: float = Field(default=30.0, gt=0)
    rank_pool_idle_seconds: float = Field(
        default=300.0,
        ge=0,
        description="How long a node's warm parent of rank processes (torch imported; one "
        "per project and Python environment, no GPU, no Ray resources) waits for the next "
        "rank before it exits; 0 turns the pool off, and a job's entrypoint.env may turn it "
        "off for itself with TRAINPLANE_RANK_POOL_IDLE_SECONDS=0 (runtime.rank_pool).",
    )
    scheduler_batch: int = Field(default=64, ge=1, description="Attempts claimed per iteration.")
    scheduler_threads: int = Field(default=8, ge=1, description="Concurrent cluster calls.")
    bundle_retention_days: float = Field(
        default=7.0,
        gt=0,
        description="Code bundles that no unfinished job names and nobody uploaded or "
        "submitted with for this long are deleted.",
    )
    cluster_probe_seconds: float = Field(default=5.0, gt=0)
    cluster_lost_after_seconds: float = Field(
        default=60.0, gt=0, description="Silence after which a cluster's attempts are lost."
    )
    advertise_url: str | None = Field(
        default=None,
        description="This API's address as clusters reach it (TRAINPLANE_URL of runs).",
    )
    preemption_enabled: bool = Field(
        default=False,
        description="Let a high-priority job that cannot start stop low-priority jobs "
        "(checkpoint first) to get their GPUs.",
    )
    preemption_grace_seconds: float = Field(
        default=120.0,
        gt=0,
        description="How long a preempted attempt has to checkpoint and stop by itself "
        "before its cluster stops it.",
    )
    preemption_min_runtime_seconds: float = Field(
        default=600.0,
        ge=0,
        description="An attempt running for less than this is never preempted (no thrashing).",
    )
    service_levels_gpu_hours: list[float] = Field(
        default=[1.0, 10.0, 100.0],
        description="Attained-service levels (GPU-hours held, all attempts): a queued job "
        "that has had less GPU time goes first, as in Tiresias' least attained service.",
    )
    service_preemption_enabled: bool = Field(
        default=True,
        description="Let a queued job stop running jobs of a lower level (most attained "
        "first) that save checkpoints, after preemption_min_runtime_seconds, to start; "
        "at the top level, an older job stops newer ones.",
    )
    service_preemption_wait_seconds: float = Field(
        default=0.0,
        ge=0,
        description="A queued job stops no running job of its priority (attained service) "
        "until it has waited this long, so that it takes GPUs that free up by themselves "
        "first; a promoted job or a higher priority stops others at once. 0 (the "
        "default): as soon as the order allows.",
    )
    starvation_seconds: float = Field(
        default=5_184_000.0,
        gt=0,
        description="A job queued longer than this (or starvation_factor x its run time "
        "so far, if more) goes first and holds the reservation until it starts.",
    )
    starvation_factor: float = Field(default=0.0, ge=0)
    top_level_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Fraction of the ready clusters' GPUs owed to the long runs, the jobs at "
        "the top_level_share_levels highest service levels: their oldest running jobs (the "
        "top level's first) up to the share cannot be stopped by lower levels, and while "
        "they hold less their oldest queued jobs go first. 0 turns the share off.",
    )
    top_level_share_levels: int = Field(
        default=2,
        ge=1,
        description="How many of the highest service levels top_level_share is owed to: "
        "2 (the default) covers the top level and the one below it, 1 the top level alone.",
    )
    fifo_wait_factor: float = Field(
        default=1.0,
        ge=0,
        description="Bound on every job's wait: this times the longest wait first come, "
        "first served would have imposed on the jobs submitted in the last "
        "fifo_wait_window_seconds (estimated from the work ahead of each when it was "
        "queued). A job that has waited that long goes first and holds the reservation. "
        "0 turns the bound off (starvation_seconds remains).",
    )
    fifo_wait_window_seconds: float = Field(default=7_776_000.0, gt=0)
    fifo_wait_quantile: float = Field(
        default=0.999,
        gt=0,
        le=1,
        description="Which of the window's estimated first-come-first-served waits sets the "
        "bound: this quantile of them (1 is the longest, which one burst of a project's "
        "jobs, each estimated at the project's mean size, can set for the whole window).",
    )
    top_level_entry_fraction: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="A job goes from the lowest service level straight to the top one, "
        "instead of climbing, if at least this fraction of its project's latest finished "
        "jobs of the same GPU count reached the top (top_level_entry_min_jobs of them at "
        "least, of the latest top_level_entry_jobs); decided when the scheduler first sees "
        "the job. 0 turns it off.",
    )
    top_level_entry_min_jobs: int = Field(default=5, ge=1)
    top_level_entry_jobs: int = Field(default=100, ge=1)
    local_slots: int | None = Field(
        default=None, ge=1, description="Worker slots of `trainplane up`'s local cluster."
    )

    # What specs may name on this machine (DESIGN.md "Trust boundaries").
    server_paths: str | None = Field(
        default=None,
        description="Colon-separated folders of this machine whose files specs may name "
        "(entrypoint.working_dir, base_model, dataset). Default: none; clients upload "
        "instead. Never anything under `home`.",
    )

    # Runs.
    checkpoint_storage: str | None = Field(
        default=None,
        description="Where jobs without checkpoint.storage keep checkpoints: an absolute "
        "path or s3://bucket/prefix. Default: `home`/checkpoints.",
    )
    stuck_after_seconds: float = Field(
        default=1800,
        gt=0,
        description="An attempt whose step has not advanced for this long is restarted "
        "(jobs can set stuck_after).",
    )

    # Tracking in MLflow.
    tracking_enabled: bool = Field(
        default=True, description="Give every job an MLflow run and register its models."
    )
    mlflow_tracking_uri: str | None = Field(
        default=None,
        validation_alias=AliasChoices("TRAINPLANE_MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_URI"),
        description="An MLflow server (http://...) or store. Default: SQLite under `home`.",
    )
    mlflow_registry_uri: str | None = Field(
        default=None,
        validation_alias=AliasChoices("TRAINPLANE_MLFLOW_REGISTRY_URI", "MLFLOW_REGISTRY_URI"),
        description="The model registry, if not the tracking store.",
    )
    mlflow_ui_url: str | None = Field(
        default=None,
        description="Where people open MLflow, for run links. Default: the tracking URI "
        "when it is a server.",
    )
    mlflow_artifacts: str | None = Field(
        default=None,
        description="Artifact root of experiments trainplane creates in a local store. "
        "Default: `home`/mlflow-artifacts.",
    )
    tracking_interval_seconds: float = Field(
        default=2.0, gt=0, description="How often a running job's new metrics go to MLflow."
    )
    tracking_max_backoff_seconds: float = Field(
        default=300.0,
        gt=0,
        description="While MLflow fails, a job's writes are retried after doubling delays "
        "up to this.",
    )
    tracking_lease_seconds: float = Field(
        default=120.0,
        gt=0,
        description="How long a pass owns a job; renewed while a model uploads.",
    )
    tracking_batch: int = Field(default=32, ge=1, description="Jobs claimed per tracking pass.")
    tracking_threads: int = Field(default=4, ge=1, description="Jobs written to MLflow at once.")

    @field_validator("bootstrap_token", "secret_key", "metrics_token")
    @classmethod
    def _refuse_weak_secret(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if value is None:
            return None
        secret = value.get_secret_value()
        if secret.lower() in _WEAK_SECRETS or len(secret) < MIN_SECRET_LENGTH:
            raise ValueError(
                f"TRAINPLANE_{str(info.field_name).upper()} must be at least "
                f"{MIN_SECRET_LENGTH} characters and not a well-known placeholder"
            )
        return value

    @field_validator("checkpoint_storage")
    @classmethod
    def _storage_location(cls, value: str | None) -> str | None:
        if value is None:
            return None
        # Runs on other machines write there: a relative path would mean
        # something different on each of them.
        if value.startswith("s3://") and urlparse(value).netloc:
            return value.rstrip("/")
        if "://" not in value and os.path.isabs(value):
            return value.rstrip("/") or "/"
        raise ValueError(
            "TRAINPLANE_CHECKPOINT_STORAGE must be an absolute path or s3://bucket/prefix"
        )

    @field_validator("server_paths")
    @classmethod
    def _server_paths(cls, value: str | None) -> str | None:
        for root in (value or "").split(":"):
            if root and not os.path.isabs(root):
                raise ValueError(
                    f"TRAINPLANE_SERVER_PATHS: {root!r} is not an absolute path "
                    "(list absolute folders, separated by ':')"
                )
        return value

    def service_rules(self) -> ServiceRules:
        """The attained-service order's settings, as the scheduler uses them."""
        from trainplane.jobs.service_queues import ServiceRules

        return ServiceRules(
            thresholds_gpu_hours=tuple(sorted(self.service_levels_gpu_hours)),
            starve_after_seconds=self.starvation_seconds,
            starve_factor=self.starvation_factor,
            min_run_seconds=self.preemption_min_runtime_seconds,
            preempt=self.service_preemption_enabled,
            preempt_after_wait_seconds=self.service_preemption_wait_seconds,
            top_share=self.top_level_share,
            share_levels=self.top_level_share_levels,
            fifo_wait_factor=self.fifo_wait_factor,
            fifo_wait_window_seconds=self.fifo_wait_window_seconds,
            fifo_wait_quantile=self.fifo_wait_quantile,
            entry_top_fraction=self.top_level_entry_fraction,
            entry_min_peers=self.top_level_entry_min_jobs,
            entry_peers=self.top_level_entry_jobs,
        )

    @property
    def server_path_roots(self) -> tuple[str, ...]:
        return tuple(
            os.path.normpath(root) for root in (self.server_paths or "").split(":") if root
        )

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.home / 'trainplane.db'}"

    @property
    def resolved_checkpoint_storage(self) -> str:
        return self.checkpoint_storage or str(self.home.absolute() / "checkpoints")

    @property
    def resolved_tracking_uri(self) -> str:
        return self.mlflow_tracking_uri or f"sqlite:///{self.home.absolute() / 'mlflow.db'}"

    @property
    def resolved_registry_uri(self) -> str:
        return self.mlflow_registry_uri or self.resolved_tracking_uri

    @property
    def resolved_mlflow_artifacts(self) -> str:
        return self.mlflow_artifacts or str(self.home.absolute() / "mlflow-artifacts")

    @property
    def resolved_mlflow_ui_url(self) -> str | None:
        if self.mlflow_ui_url:
            return self.mlflow_ui_url
        uri = self.resolved_tracking_uri
        return uri if uri.startswith(("http://", "https://")) else None

    @property
    def is_sqlite(self) -> bool:
        return self.resolved_database_url.startswith("sqlite")

    @property
    def should_auto_migrate(self) -> bool:
        return self.is_sqlite if self.auto_migrate is None else self.auto_migrate

    # Uploads of a fine-tune's base model and datasets (PUT /v1/projects/{name}/inputs/...).
    max_input_bytes: int = Field(
        default=32 << 30,
        ge=1,
        description="The largest input file or zipped model folder a client may upload, in "
        "bytes (default 32 GiB: a 14B-parameter model in bf16). Refused with 413 before "
        "it is read.",
    )
