"""Settings: defaults, refusal of weak secrets, and nothing read at import time."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from trainplane.config import Settings


def test_embedded_default_is_sqlite_under_home(tmp_path, monkeypatch):
    monkeypatch.delenv("TRAINPLANE_DATABASE_URL", raising=False)
    monkeypatch.setenv("TRAINPLANE_HOME", str(tmp_path))
    settings = Settings()
    assert settings.resolved_database_url == f"sqlite:///{tmp_path}/trainplane.db"
    assert settings.should_auto_migrate


def test_postgres_is_not_migrated_implicitly(monkeypatch):
    monkeypatch.setenv("TRAINPLANE_DATABASE_URL", "postgresql+psycopg://u@h/db")
    assert not Settings().should_auto_migrate
    monkeypatch.setenv("TRAINPLANE_AUTO_MIGRATE", "true")
    assert Settings().should_auto_migrate


@pytest.mark.parametrize("token", ["changeme", "short", "password"])
def test_weak_bootstrap_tokens_are_refused(monkeypatch, token):
    monkeypatch.setenv("TRAINPLANE_BOOTSTRAP_TOKEN", token)
    with pytest.raises(ValidationError, match="TRAINPLANE_BOOTSTRAP_TOKEN"):
        Settings()


def test_a_strong_bootstrap_token_is_kept_secret(monkeypatch):
    monkeypatch.setenv("TRAINPLANE_BOOTSTRAP_TOKEN", "a-long-random-token-0123456789")
    settings = Settings()
    assert "0123456789" not in repr(settings)
    assert settings.bootstrap_token.get_secret_value().endswith("0123456789")


def test_importing_the_app_reads_no_settings():
    # A broken environment must not break imports: settings are read when an
    # app or command is built.
    env = {**os.environ, "TRAINPLANE_BOOTSTRAP_TOKEN": "x", "TRAINPLANE_DB_POOL_SIZE": "zero"}
    code = "import trainplane.api.app, trainplane.cli.main, trainplane.services.jobs"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_checkpoint_storage_defaults_under_home(tmp_path, monkeypatch):
    monkeypatch.delenv("TRAINPLANE_CHECKPOINT_STORAGE", raising=False)
    monkeypatch.setenv("TRAINPLANE_HOME", str(tmp_path))
    assert Settings().resolved_checkpoint_storage == f"{tmp_path}/checkpoints"


@pytest.mark.parametrize(
    ("value", "resolved"),
    [("/data/ckpt/", "/data/ckpt"), ("s3://bucket/prefix/", "s3://bucket/prefix")],
)
def test_checkpoint_storage_takes_absolute_paths_and_s3(monkeypatch, value, resolved):
    monkeypatch.setenv("TRAINPLANE_CHECKPOINT_STORAGE", value)
    assert Settings().resolved_checkpoint_storage == resolved


@pytest.mark.parametrize("value", ["relative/ckpt", "s3://", "gs://bucket/x"])
def test_checkpoint_storage_refuses_what_runs_elsewhere_cannot_reach(monkeypatch, value):
    monkeypatch.setenv("TRAINPLANE_CHECKPOINT_STORAGE", value)
    with pytest.raises(ValidationError, match="TRAINPLANE_CHECKPOINT_STORAGE"):
        Settings()


def test_a_weak_secret_key_is_refused(monkeypatch):
    monkeypatch.setenv("TRAINPLANE_SECRET_KEY", "changeme")
    with pytest.raises(ValidationError, match="TRAINPLANE_SECRET_KEY"):
        Settings()


def test_the_schedulers_queue_rules_default_to_the_ones_the_replay_measures(monkeypatch):
    """The replay runs ``ServiceRules()``; the server, its settings' rules."""
    from trainplane.jobs.service_queues import ServiceRules

    assert Settings().service_rules() == ServiceRules()
    monkeypatch.setenv("TRAINPLANE_TOP_LEVEL_ENTRY_FRACTION", "0")
    monkeypatch.setenv("TRAINPLANE_TOP_LEVEL_ENTRY_MIN_JOBS", "8")
    monkeypatch.setenv("TRAINPLANE_TOP_LEVEL_SHARE_LEVELS", "1")
    rules = Settings().service_rules()
    assert (rules.entry_top_fraction, rules.entry_min_peers) == (0.0, 8)
    assert rules.share_levels == 1 and not rules.in_share(rules.top_level - 1)
    monkeypatch.setenv("TRAINPLANE_TOP_LEVEL_SHARE_LEVELS", "0")
    with pytest.raises(ValidationError, match="top_level_share_levels"):
        Settings()
    monkeypatch.setenv("TRAINPLANE_TOP_LEVEL_SHARE_LEVELS", "1")
    monkeypatch.setenv("TRAINPLANE_FIFO_WAIT_QUANTILE", "1")
    assert Settings().service_rules().fifo_wait_quantile == 1.0
    monkeypatch.setenv("TRAINPLANE_FIFO_WAIT_QUANTILE", "99.9")  # a percentile, not a quantile
    with pytest.raises(ValidationError, match="fifo_wait_quantile"):
        Settings()
