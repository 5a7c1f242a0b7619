"""``trainplane submit --wait`` of a sweep and ``trainplane jobs trials``,
against a real ``trainplane server`` whose sweep controller creates the
trials. It has no cluster, so the trials stay queued until the test ends them
in the database as their runtimes would (one pruned, one succeeded with its
loss); the controller then ends the sweep."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from tests.cli.conftest import TRAINPLANE, clean_env, cli_for, on_sqlite
from trainplane.db.base import utcnow
from trainplane.db.engine import make_engine, session_factory
from trainplane.db.models import Job, SweepTrial
from trainplane.testing.server import ServerProcess

SWEEP = {
    "kind": "sweep",
    "name": "cli-sweep",
    "trial": {
        "kind": "train",
        "entrypoint": {"function": "train:train_loop", "working_dir": "code"},
        "resources": {"gpus": 1},
    },
    "parameters": {"entrypoint.args.lr": {"values": [0.1, 0.01]}},
    "objective": {"metric": "loss"},
    "search": {"algorithm": "grid", "parallel": 2},
}
PRUNED = "pruned at rung 0 (step 5): loss 2.5 is not in the best 1/2 of 2 trials there"


@pytest.fixture(scope="module")
def sweep_server(_sqlite_template, tmp_path_factory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("sweep-cli-server")
    server = on_sqlite(ServerProcess, _sqlite_template, home)
    server.env["TRAINPLANE_SCHEDULER_POLL_SECONDS"] = "0.3"
    with server:
        yield server


@pytest.fixture(scope="module")
def database(sweep_server) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(sweep_server.env["TRAINPLANE_DATABASE_URL"])
    yield session_factory(engine)
    engine.dispose()


@pytest.fixture
def sweep_file(tmp_path: Path) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("def train_loop(ctx):\n    pass\n")
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(SWEEP))
    return path


class Submit:
    """``submit --wait`` as a CI step runs it (stdout and stderr pipes), its
    stderr read as it comes."""

    def __init__(self, server: ServerProcess, path: Path, *args: str) -> None:
        self.process = subprocess.Popen(
            [str(TRAINPLANE), "submit", str(path), "--wait", *args],
            env=clean_env(TRAINPLANE_URL=server.url, TRAINPLANE_PROGRESS_INTERVAL="0"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.err: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.err.append(line)

    def said(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.err):
            assert time.monotonic() < deadline, f"never said {text!r}: {''.join(self.err)}"
            time.sleep(0.1)

    def end(self) -> tuple[int, str, str]:
        """Exit code, stdout, stderr."""
        try:
            out = self.process.stdout.read() if self.process.stdout else ""
            code = self.process.wait(timeout=90)
            self.reader.join(timeout=10)
            return code, out, "".join(self.err)
        finally:
            self.process.kill()


def _trials(database: sessionmaker[Session], name: str, count: int) -> list[SweepTrial]:
    """The sweep's trials once the controller created ``count`` of them."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with database() as session:
            rows = session.scalars(
                select(SweepTrial)
                .join(Job, Job.id == SweepTrial.sweep_id)
                .where(Job.name == name)
                .order_by(SweepTrial.number)
            ).all()
        if len(rows) == count:
            return list(rows)
        time.sleep(0.2)
    raise AssertionError(f"the controller made no {count} trials of {name}")


def _end(database: sessionmaker[Session], trial: SweepTrial, status: str, reason: str, **values):
    """The trial ended as its runtime and the scheduler would leave it."""
    with database() as session, session.begin():
        session.execute(
            update(SweepTrial).where(SweepTrial.job_id == trial.job_id).values(**values)
        )
        session.execute(
            update(Job)
            .where(Job.id == trial.job_id)
            .values(status=status, reason=reason, finished_at=utcnow())
        )


def test_submit_wait_shows_the_trials_and_ends_with_the_best(sweep_server, database, sweep_file):
    # The trials never ran, so their sweep's MLflow run has no model to register.
    submit = Submit(sweep_server, sweep_file, "--output", "json", "--tracking-timeout", "1")
    first, second = _trials(database, "cli-sweep", 2)
    assert (first.parameters, second.parameters) == (
        {"entrypoint.args.lr": 0.1},
        {"entrypoint.args.lr": 0.01},
    )
    submit.said("trial 2 cli-sweep-2 QUEUED lr=0.01")
    _end(
        database, first, "CANCELLED", PRUNED, pruned_reason=PRUNED, last_value=2.5,
        best_value=2.5, last_step=5, values={"5": 2.5},
    )  # fmt: skip
    _end(
        database, second, "SUCCEEDED", "completed", last_value=0.4, best_value=0.35,
        last_step=30, values={"5": 1.9},
    )  # fmt: skip
    code, out, err = submit.end()
    assert code == 0, err
    result = json.loads(out)
    assert (result["status"], result["outcome"], result["name"]) == (
        "SUCCEEDED",
        "succeeded",
        "cli-sweep",
    )
    assert result["best_trial"]["name"] == "cli-sweep-2"
    assert result["best_trial"]["parameters"] == {"entrypoint.args.lr": 0.01}
    assert result["metrics"] == {"loss": 0.4}  # the best trial's, for --fail-on
    items = result["trials"]["items"]
    assert [(t["number"], t["status"], t["last_value"]) for t in items] == [
        (1, "CANCELLED", 2.5),
        (2, "SUCCEEDED", 0.4),
    ]
    assert items[0]["reason"] == PRUNED
    # A CI log: a line per trial change, the final table, the best trial.
    assert "trial 1 cli-sweep-1 QUEUED lr=0.1" in err
    assert f"trial 1 cli-sweep-1 CANCELLED lr=0.1 step 5 loss=2.5 (best 2.5): {PRUNED}" in err
    assert "#   TRIAL        STATUS     LR    LOSS  BEST  STEP  REASON" in err
    assert "2*  cli-sweep-2  SUCCEEDED  0.01  0.4   0.35  30    completed" in err
    assert "best trial cli-sweep-2 (lr=0.01): loss 0.4 (min)" in err
    assert "\x1b" not in err
    # `trainplane server` reads no path of this machine: the trial's folder went up.
    sweep = httpx.get(f"{sweep_server.url}/v1/jobs/{result['id']}", timeout=10).json()
    assert sweep["spec"]["trial"]["entrypoint"]["code"].startswith("sha256:")

    cli = cli_for(sweep_server)
    table = cli("jobs", "trials", "cli-sweep")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["#", "TRIAL", "STATUS", "LR", "LOSS", "BEST", "STEP", "REASON"]
    assert lines[2].startswith("2*  cli-sweep-2  SUCCEEDED")
    assert lines[-1] == "* best trial cli-sweep-2 (lr=0.01): loss 0.4 (min)"
    listed = httpx.get(f"{sweep_server.url}/v1/jobs/{result['id']}/trials", timeout=10).json()
    assert json.loads(cli("jobs", "trials", result["id"], "--output", "json").stdout) == listed
    assert yaml.safe_load(cli("jobs", "trials", result["id"], "--output", "yaml").stdout) == listed


def test_a_cancelled_sweep_ends_submit_wait_with_exit_3(sweep_server, database, sweep_file):
    document = {**SWEEP, "name": "cli-cancelled"}
    sweep_file.write_text(yaml.safe_dump(document))
    submit = Submit(sweep_server, sweep_file, "--tracking-timeout", "1")
    trials = _trials(database, "cli-cancelled", 2)
    submit.said("trial 2 cli-cancelled-2 QUEUED")
    sweep_id = trials[0].sweep_id
    cancelled = cli_for(sweep_server)("jobs", "cancel", sweep_id)
    assert cancelled.exit_code == 0, cancelled.output
    code, out, err = submit.end()
    assert code == 3, err
    assert out == f"{sweep_id}\n"  # the id, and nothing else, on stdout
    with database() as session:
        statuses = {session.get(Job, t.job_id).status for t in trials}
    assert statuses == {"CANCELLED"}
    assert f"sweep {sweep_id} CANCELLED" in err
