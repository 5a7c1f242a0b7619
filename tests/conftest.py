"""Shared fixtures: real databases (a throwaway PostgreSQL server and SQLite
files), settings, sessions, the real FastAPI app, a local Ray cluster, a real
S3 API (moto's server on 127.0.0.1) and a one-rank gloo process group.

Tests that take ``db_url`` (directly or through ``settings``, ``sessions`` or
``api``) run once per backend: PostgreSQL always, SQLite too unless marked
``postgres_only``. ``TRAINPLANE_TEST_BACKENDS=postgres`` (or ``sqlite``) narrows
that for a quick local run. ``TRAINPLANE_TEST_DATABASE_URL`` points the suite at
an existing PostgreSQL server instead of starting one; its user must be allowed
to create databases.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import torch.distributed as dist
from fastapi.testclient import TestClient
from sqlalchemy import Engine, insert
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from tests import failure_logs
from tests.cluster_hygiene import stop_leftovers
from tests.factories import EXAMPLES, finetune_spec
from trainplane.api.app import create_app
from trainplane.backends.local_ray import LocalRayHead
from trainplane.config import Settings
from trainplane.db import migrate
from trainplane.db.base import Base, utcnow
from trainplane.db.engine import make_engine, session_factory
from trainplane.db.models import Project
from trainplane.net import free_port
from trainplane.testing.postgres import ThrowawayPostgres

ALL_BACKENDS = ("postgres", "sqlite")
RAY_SLOTS = 2
DEFAULT_PROJECT_ID = "0" * 26
REPO_ROOT = Path(__file__).resolve().parent.parent
TORCH_EXTENSIONS_CACHE = REPO_ROOT / ".cache" / "torch_extensions"


def _backends() -> tuple[str, ...]:
    wanted = os.environ.get("TRAINPLANE_TEST_BACKENDS")
    if not wanted:
        return ALL_BACKENDS
    chosen = tuple(b.strip() for b in wanted.split(",") if b.strip())
    unknown = set(chosen) - set(ALL_BACKENDS)
    if unknown:
        raise pytest.UsageError(f"TRAINPLANE_TEST_BACKENDS: unknown backend(s) {unknown}")
    return chosen


# Tests that run Ray clusters, training, a browser or benchmarks: CPU-bound and
# memory-hungry, so scripts/test runs them one at a time, after the others
# (which it runs two at a time). Any test on the shared Ray head is one; so is
# every test in these folders and modules, unless its module is marked
# ``ray_free``: a unit test that merely lives next to the runtime it tests, or
# one that trains a tiny model in this process as a world of one (no Ray, no
# other processes; seconds each, so two at a time with the light tests).
CLUSTER_TESTS = (
    "tests/chaos/",
    "tests/runtime/",
    "tests/recipes/",
    "tests/scheduler/",
    "tests/tracking/test_tracking_runs.py",
    "tests/dashboard/test_browser.py",
    "tests/dashboard/test_sweep_page.py",
    "tests/cli/test_ci_runs.py",
    "tests/test_benchmarks.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.relative_to(REPO_ROOT).as_posix()
        on_the_head = "ray_head" in getattr(item, "fixturenames", ())
        in_a_cluster_folder = where.startswith(CLUSTER_TESTS) and not item.get_closest_marker(
            "ray_free"
        )
        if on_the_head or in_a_cluster_folder:
            item.add_marker(pytest.mark.cluster)


_STARTED_AT = pytest.StashKey[float]()


def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_STARTED_AT] = time.time()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed and item.get_closest_marker("cluster") and _STARTED_AT in item.stash:
        where = [(item.config._tmp_path_factory.getbasetemp(), "*.log")]  # type: ignore[attr-defined]
        head = getattr(item, "funcargs", {}).get("ray_head")
        if head is not None:
            # Ray's own logs are many; its job drivers' carry the workers' output.
            where.append((head.state_dir, "job-driver-*.log"))
        report.sections.extend(failure_logs.report_sections(where, item.stash[_STARTED_AT]))
    return report


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        backends = _backends()
        if metafunc.definition.get_closest_marker("postgres_only"):
            backends = tuple(b for b in backends if b == "postgres")
        metafunc.parametrize("backend", backends, scope="session")


class PostgresServer:
    """Where test databases are created: a throwaway server, or an existing one."""

    def __init__(self) -> None:
        existing = os.environ.get("TRAINPLANE_TEST_DATABASE_URL")
        self._throwaway = None if existing else ThrowawayPostgres().start()
        self._admin_url = make_url(existing or self._throwaway.admin_url)  # type: ignore[union-attr]

    def url(self, database: str) -> str:
        return self._admin_url.set(database=database).render_as_string(hide_password=False)

    def create_database(self, prefix: str = "tp") -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        dsn = self.url("postgres").replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self._throwaway is not None:
            self._throwaway.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _migrated_postgres(postgres_server: PostgresServer) -> str:
    url = postgres_server.create_database("tp_suite")
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    migrate.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def _postgres_engine(_migrated_postgres: str) -> Iterator[Engine]:
    engine = make_engine(_migrated_postgres, pool_size=20)
    yield engine
    engine.dispose()


def _reset_postgres(engine: Engine) -> None:
    tables = ", ".join(t.name for t in Base.metadata.sorted_tables)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
        conn.execute(
            insert(Project).values(
                id=DEFAULT_PROJECT_ID, name="default", description="", created_at=utcnow()
            )
        )


@pytest.fixture
def db_url(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> str:
    """A migrated database holding only the default project, fresh for each test."""
    if backend == "postgres":
        engine = request.getfixturevalue("_postgres_engine")
        _reset_postgres(engine)
        return engine.url.render_as_string(hide_password=False)
    template = request.getfixturevalue("_sqlite_template")
    path = tmp_path / "trainplane.db"
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"


@pytest.fixture(scope="session")
def server_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folders of the server's own that specs may name: listed in the test
    settings' server_paths, as an operator lists a shared data folder."""
    return tmp_path_factory.mktemp("server-files")


@pytest.fixture
def server_dir(server_files: Path, tmp_path: Path) -> Path:
    """A fresh folder of this test's among the server's own files."""
    folder = server_files / tmp_path.name
    folder.mkdir()
    return folder


@pytest.fixture
def settings(db_url: str, tmp_path: Path, server_files: Path) -> Settings:
    # The examples are the server's own code folders too (tests.factories.TRAIN_SPEC).
    return Settings(
        home=tmp_path / "home",
        database_url=db_url,
        auto_migrate=False,
        server_paths=f"{EXAMPLES}:{server_files}",
    )


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    engine = make_engine(db_url)
    yield engine
    engine.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    return session_factory(engine)


@pytest.fixture
def session(sessions: sessionmaker[Session]) -> Iterator[Session]:
    with sessions() as session:
        yield session


@pytest.fixture
def api(settings: Settings) -> Iterator[TestClient]:
    """The real app, over HTTP semantics, in-process."""
    app = create_app(settings)
    with TestClient(app) as client:
        yield client


@contextlib.contextmanager
def local_ray_head(
    tmp_path_factory: pytest.TempPathFactory, *, slots: int, gpus: int = 0
) -> Iterator[LocalRayHead]:
    """A Ray head of ``slots`` CPU worker slots, stopped (by PID) on exit.
    ``gpus``: GPUs it declares (it hands out CUDA_VISIBLE_DEVICES without any)."""
    home = tmp_path_factory.mktemp("ray-home")
    with pytest.MonkeyPatch.context() as patch:
        # Ray writes under $HOME; keep it out of the real one.
        patch.setenv("HOME", str(home))
        # DeepSpeed compiles its ops on first use; keep them across sessions.
        patch.setenv("TORCH_EXTENSIONS_DIR", str(TORCH_EXTENSIONS_CACHE))
        # Ray's unix sockets live under its state folder: keep the path short.
        state = Path(tempfile.mkdtemp(prefix="tp-ray-", dir="/tmp"))
        try:
            with LocalRayHead(state, slots=slots, gpus=gpus) as head:
                yield head
        finally:
            shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_head(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalRayHead]:
    with local_ray_head(tmp_path_factory, slots=RAY_SLOTS) as head:
        request.session.stash[_RAY_HEAD] = head
        yield head
        del request.session.stash[_RAY_HEAD]


@pytest.fixture(scope="session", autouse=True)
def _environment_tools_first() -> Iterator[None]:
    """This environment's ``bin`` first on PATH, as the Ray head has it
    (backends/local_ray), for this process and the ones it starts. DeepSpeed
    builds its ops with the first ``ninja`` on PATH, and two ninja versions
    (the system's, the environment's) record different command hashes, so
    each rebuilt what the other had just built (about 50 s each time, several
    times a run) in the one extensions folder the tests share."""
    tools = str(Path(sys.executable).parent)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{tools}{os.pathsep}{os.environ.get('PATH', '')}")
        yield


@pytest.fixture(scope="module", autouse=True)
def _idle_cluster_after_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """Once a module's tests and fixtures are done, what they left running on
    the session's Ray head is stopped (see tests/cluster_hygiene.py). At the
    module's end, not each test's: a module's fixtures may keep jobs running
    across its tests on purpose."""
    yield
    head = request.session.stash.get(_RAY_HEAD, None)
    if head is None:
        return
    stopped = stop_leftovers(head.address)
    if stopped:
        warnings.warn(
            f"{request.node.nodeid} left Ray jobs running; stopped: " + ", ".join(stopped),
            LeftoverRayJobs,
            stacklevel=1,
        )


class LeftoverRayJobs(UserWarning):
    pass


_RAY_HEAD = pytest.StashKey[LocalRayHead]()


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "wb")  # noqa: SIM115
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(10)
        log.close()


@pytest.fixture
def s3_bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket; boto3 in this process points at the moto server."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    from trainplane.storage.backends import s3_client

    name = f"ckpt-{uuid.uuid4().hex[:12]}"
    s3_client().create_bucket(Bucket=name)
    return name


@pytest.fixture
def one_rank_group(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """torch.distributed initialised as a world of one, as a one-worker job has."""
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    # DeepSpeed compiles its CPU communication op on first use: here into the
    # folder the Ray and torchrun tests use, so a test run compiles it once.
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(TORCH_EXTENSIONS_CACHE))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
        os.environ.pop("TRAINPLANE_DEVICE", None)


@dataclass(frozen=True)
class FinetuneFiles:
    """A tiny causal LM and its datasets, as a fine-tune reads them."""

    model: Path
    train: Path
    eval: Path

    def spec(self, **overrides: Any) -> dict[str, Any]:
        fields = {
            "base_model": str(self.model),
            "dataset": {"train": str(self.train), "eval": str(self.eval)},
            **overrides,
        }
        return finetune_spec(**fields)


@pytest.fixture(scope="session")
def finetune_files(server_files: Path) -> FinetuneFiles:
    """Built once per session, among the server's own files: a random-init
    Llama (transformers) and 240 + 60 prompt/completion rows."""
    from trainplane.testing.tiny_models import arithmetic_rows, build_tiny_llama, write_jsonl

    folder = server_files / "finetune"
    folder.mkdir()
    return FinetuneFiles(
        model=build_tiny_llama(folder / "model"),
        train=write_jsonl(folder / "train.jsonl", arithmetic_rows(0, 240)),
        eval=write_jsonl(folder / "eval.jsonl", arithmetic_rows(240, 300)),
    )
