"""Migrations: upgrade -> check -> downgrade -> upgrade on a fresh database of
each backend, one head, and the CLI path a deployment uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from trainplane.db import migrate
from trainplane.db.base import Base
from trainplane.db.engine import make_engine
from trainplane.db.locks import MIGRATION_LOCK_KEY

ROOT = Path(__file__).resolve().parents[2]
TABLES = {t.name for t in Base.metadata.sorted_tables}


@pytest.fixture
def fresh_url(backend, request, tmp_path):
    if backend == "postgres":
        return request.getfixturevalue("postgres_server").create_database("tp_migrate")
    return f"sqlite:///{tmp_path / 'fresh.db'}"


def _tables(url):
    engine = make_engine(url, single_use=True)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_there_is_exactly_one_head():
    config = migrate.alembic_config("sqlite://")
    assert len(ScriptDirectory.from_config(config).get_heads()) == 1


def test_migration_files_are_dated():
    names = [
        p.name for p in (ROOT / "migrations" / "versions").glob("*.py") if p.name != "__init__.py"
    ]
    assert names
    for name in names:
        assert name[:4].isdigit() and name[4] == "_" and name[10] == "_", name


def test_upgrade_check_downgrade_upgrade(fresh_url):
    config = migrate.alembic_config(fresh_url)
    command.upgrade(config, "head")
    assert _tables(fresh_url) >= TABLES
    command.check(config)  # raises if the models and the migrations disagree

    command.downgrade(config, "base")
    assert _tables(fresh_url) & TABLES == set()

    command.upgrade(config, "head")
    command.check(config)
    engine = make_engine(fresh_url, single_use=True)
    try:
        assert migrate.current_revisions(engine) == migrate.head_revisions(fresh_url)
    finally:
        engine.dispose()


def test_the_start_up_upgrade_counts_what_it_applied(fresh_url):
    """The server logs one line for its start-up migration, with this count."""
    config = migrate.alembic_config(fresh_url)
    script = ScriptDirectory.from_config(config)
    every = len(list(script.walk_revisions()))
    assert migrate.upgrade_counting(fresh_url) == every
    assert migrate.upgrade_counting(fresh_url) == 0
    (head,) = script.get_heads()
    command.downgrade(config, script.get_revision(head).down_revision or "base")
    assert migrate.upgrade_counting(fresh_url) == 1


def test_cli_db_upgrade_then_alembic_check_from_the_checkout(postgres_server, tmp_path):
    url = postgres_server.create_database("tp_cli")
    env = {**os.environ, "TRAINPLANE_DATABASE_URL": url, "TRAINPLANE_HOME": str(tmp_path)}
    bindir = Path(sys.executable).parent
    upgrade = subprocess.run(
        [bindir / "trainplane", "db", "upgrade"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert upgrade.returncode == 0, upgrade.stderr
    assert migrate.head_revisions(url)[0] in upgrade.stderr
    check = subprocess.run(
        [bindir / "alembic", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stderr
    assert "No new upgrade operations detected" in check.stdout + check.stderr


def _upgrade_process(url: str, home: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "TRAINPLANE_DATABASE_URL": url, "TRAINPLANE_HOME": str(home)}
    return subprocess.Popen(
        [Path(sys.executable).parent / "trainplane", "db", "upgrade"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_upgrades_run_one_at_a_time_under_a_lock(postgres_server, tmp_path):
    """A rollout may start several upgrades at once: while one holds the
    migration lock the others wait, then find the schema at head."""
    url = postgres_server.create_database("tp_locked")
    holder = make_engine(url, single_use=True)
    with holder.connect() as connection:
        connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        upgrades = [_upgrade_process(url, tmp_path / f"home-{i}") for i in range(2)]
        time.sleep(4)
        assert [p.poll() for p in upgrades] == [None, None], "they wait for the lock"
        assert "alembic_version" not in _tables(url)
        connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})
    holder.dispose()
    outputs = [p.communicate(timeout=120)[0] for p in upgrades]
    assert [p.returncode for p in upgrades] == [0, 0], outputs
    engine = make_engine(url, single_use=True)
    try:
        assert migrate.current_revisions(engine) == migrate.head_revisions(url)
        assert _tables(url) >= TABLES
    finally:
        engine.dispose()


def test_owned_names_are_backfilled_from_earlier_jobs(fresh_url):
    """Names used before ownership was kept belong to the first project that
    used them (a model, an explicit experiment), except that an experiment
    named like a project is that project's default one, and so its own."""
    config = migrate.alembic_config(fresh_url)
    command.upgrade(config, "b7c1e2d3f4a5")
    engine = make_engine(fresh_url, single_use=True)
    jobs = [
        # (id, project, created, spec)
        ("job1", "p-beta", "2026-01-01", {"register_model": {"name": "shared"}}),
        ("job2", "p-alpha", "2026-01-02", {"register_model": {"name": "shared"}}),
        ("job3", "p-alpha", "2026-01-03", {"tracking": {"experiment": "exp-a"}}),
        # Earlier than any job of gamma: gamma's default experiment stays gamma's.
        ("job0", "p-alpha", "2025-12-31", {"tracking": {"experiment": "gamma"}}),
    ]
    try:
        with engine.begin() as connection:
            for project_id, name in (
                ("p-alpha", "alpha"),
                ("p-beta", "beta"),
                ("p-gamma", "gamma"),
            ):
                connection.execute(
                    text(
                        "INSERT INTO projects (id, name, description, created_at, weight) "
                        "VALUES (:id, :name, '', '2026-01-01', 1)"
                    ),
                    {"id": project_id, "name": name},
                )
            for job_id, project_id, created, spec in jobs:
                connection.execute(
                    text(
                        "INSERT INTO jobs (id, project_id, name, kind, status, reason, priority, "
                        "gpus, strategy, strategy_reason, spec, spec_hash, submitted_by, "
                        "created_at, updated_at) VALUES (:id, :project_id, 'j', 'train', "
                        "'SUCCEEDED', '', 50, 1, 'ddp', '', :spec, 'h', 'me', :created, :created)"
                    ),
                    {
                        "id": job_id,
                        "project_id": project_id,
                        "spec": json.dumps(spec),
                        "created": created,
                    },
                )
        command.upgrade(config, "head")
        with engine.connect() as connection:
            owners = {
                (kind, name): project_id
                for kind, name, project_id in connection.execute(
                    text("SELECT kind, name, project_id FROM owned_names")
                )
            }
    finally:
        engine.dispose()
    assert owners == {
        ("model", "shared"): "p-beta",
        ("experiment", "beta"): "p-beta",
        ("experiment", "alpha"): "p-alpha",
        ("experiment", "exp-a"): "p-alpha",
        ("experiment", "gamma"): "p-gamma",
        # The project every installation starts with, created by the first migration.
        ("experiment", "default"): "0" * 26,
    }
