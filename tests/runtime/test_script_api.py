"""trainplane.script as scripts use it: reports from rank 0 only, the folders,
a checkpoint by hand or without storage, the last report left at exit, and
stop requests reaching every rank: broadcast over a gloo process group, and
without one through the real progress endpoint (rank 0's reports, a poll on
the other node, the node's stop file for its other rank)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sqlalchemy import select, update

from tests.factories import make_attempt, make_job, small_spec
from tests.scheduler.conftest import api_on_a_port
from trainplane import script
from trainplane.config import Settings
from trainplane.db.base import utcnow
from trainplane.db.models import JobAttempt, JobMetric
from trainplane.jobs.states import JobStatus
from trainplane.net import free_port
from trainplane.runtime import env as tp_env
from trainplane.services.attempt_tokens import TokenKey, attempt_token
from trainplane.storage import checkpoints as layout
from trainplane.storage.backends import open_storage

pytestmark = pytest.mark.ray_free

TRAINPLANE_VARIABLES = (
    *("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK"),
    *(tp_env.CHECKPOINT_URI, tp_env.CHECKPOINT_DIR, tp_env.SYNC_DIR, tp_env.NODES),
    *(tp_env.RESUME_FROM, tp_env.MODEL_DIR, tp_env.METRICS_FILE, tp_env.SPEC),
    *(tp_env.CONTROL_PLANE_URL, tp_env.JOB_ID, tp_env.ATTEMPT_ID, tp_env.ATTEMPT_TOKEN),
)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A process as a script starts: no trainplane variables, no state yet."""
    for name in TRAINPLANE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(script, "_current", None)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run_ranks(program: str, envs: list[dict[str, str]]) -> list[dict[str, object]]:
    """``program`` once per environment, at once; each one's last line, parsed."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", program],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for env in envs
    ]
    outputs = [process.communicate(timeout=120)[0] for process in processes]
    assert all(process.returncode == 0 for process in processes), outputs
    return [json.loads(output.splitlines()[-1]) for output in outputs]


def test_rank_0_reports_its_numbers_and_other_ranks_send_nothing(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics = fresh / "metrics.jsonl"
    monkeypatch.setenv(tp_env.METRICS_FILE, str(metrics))
    monkeypatch.setenv("RANK", "1")
    script.report({"loss": 1.0}, 1)
    assert not metrics.exists()

    monkeypatch.setattr(script, "_current", None)
    monkeypatch.setenv("RANK", "0")
    values = {"loss": torch.tensor(0.5), "lr": 1e-3, "epoch": 2, "name": "x", "nan": float("nan")}
    script.report(values, 7)
    (point,) = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert point["step"] == 7
    assert point["metrics"] == {"loss": 0.5, "lr": 1e-3, "epoch": 2.0}
    with pytest.raises(ValueError, match="non-negative"):
        script.report({"loss": 1.0}, -1)


def test_the_folders_come_from_the_environment_or_the_working_directory(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert script.checkpoint_dir() == str(fresh / "checkpoints")
    assert script.model_dir() == str(fresh / "model")
    assert (fresh / "checkpoints").is_dir() and (fresh / "model").is_dir()
    assert script.resume_from() is None
    monkeypatch.setenv(tp_env.CHECKPOINT_DIR, str(fresh / "scratch" / "ckpt"))
    monkeypatch.setenv(tp_env.MODEL_DIR, str(fresh / "scratch" / "model"))
    monkeypatch.setenv(tp_env.RESUME_FROM, str(fresh / "storage" / "step-20"))
    assert script.checkpoint_dir() == str(fresh / "scratch" / "ckpt")
    assert Path(script.model_dir()).is_dir()
    assert script.resume_from() == str(fresh / "storage" / "step-20")


def test_without_checkpoint_storage_a_checkpoint_says_so_once_and_leaves_the_files(
    fresh: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (Path(script.checkpoint_dir()) / "weights.pt").write_bytes(b"w")
    assert script.checkpoint(1) is None
    assert script.checkpoint(2) is None
    assert capsys.readouterr().out.count("no checkpoint storage") == 1
    assert (fresh / "checkpoints" / "weights.pt").exists()


def test_a_process_run_by_hand_publishes_with_the_metrics_it_reported(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = fresh / "storage"
    monkeypatch.setenv(tp_env.CHECKPOINT_URI, str(storage))
    script.report({"loss": 0.75}, 10)
    script.report({"eval_loss": 0.5}, 10)
    (Path(script.checkpoint_dir()) / "weights.pt").write_bytes(b"w" * 10)
    assert script.checkpoint(10) == f"{storage}/step-10"
    assert os.listdir(script.checkpoint_dir()) == []  # the default folder is emptied

    own = fresh / "checkpoint-20"
    own.mkdir()
    (own / "weights.pt").write_bytes(b"v" * 20)
    script.checkpoint(20, folder=own, metrics={"eval_loss": 0.25})
    assert (own / "weights.pt").exists()  # a folder given is left as it is
    saved = {f.step: f.manifest for f in layout.complete_checkpoints(open_storage(str(storage)))}
    assert saved[10] is not None and saved[20] is not None
    assert saved[10].metrics == {"loss": 0.75, "eval_loss": 0.5}
    assert saved[20].metrics == {"eval_loss": 0.25}
    assert (saved[10].world_size, saved[10].reason) == (1, None)


def test_at_exit_rank_0_leaves_its_last_report_for_the_model(tmp_path: Path) -> None:
    program = """
from trainplane import script
script.report({"loss": 1.0, "lr": 0.1}, 1)
script.report({"loss": 0.5}, 2)
script.report({"eval_loss": 0.7}, 2)
print("{}")
"""
    sync = tmp_path / ".sync"
    _run_ranks(program, [{tp_env.SYNC_DIR: str(sync), "RANK": "0"}])
    final = json.loads((sync / script.FINAL_REPORT).read_text())
    assert final == {"step": 2, "metrics": {"loss": 0.5, "lr": 0.1, "eval_loss": 0.7}}


def _rank_env(tmp_path: Path, rank: int, local_rank: int, node: int, nodes: tuple[int, ...]):
    where = tmp_path / f"node-{node}"
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(sum(nodes)),
        "LOCAL_WORLD_SIZE": str(nodes[node]),
        "GROUP_RANK": str(node),
        tp_env.NODES: str(len(nodes)),
        tp_env.CHECKPOINT_URI: str(tmp_path / "storage"),
        tp_env.CHECKPOINT_DIR: str(where / "checkpoints"),
        tp_env.SYNC_DIR: str(where / ".sync"),
    }


def test_should_stop_is_broadcast_from_rank_0_and_the_save_says_preempted(tmp_path: Path) -> None:
    """Two gloo ranks on two nodes: only rank 0's node is told (its stop file,
    as its reporter writes it on hearing the stop); rank 1 learns it from the
    broadcast."""
    program = """
import json, os
from pathlib import Path
import torch.distributed as dist
from trainplane import script
from trainplane.runtime.stop_watch import STOP_FILE
dist.init_process_group("gloo")
rank = dist.get_rank()
before = script.should_stop()
if rank == 0:
    sync = Path(os.environ["TRAINPLANE_SYNC_DIR"])
    sync.mkdir(parents=True, exist_ok=True)  # made by the driver, in a job
    (sync / STOP_FILE).write_text("preempted")
after = script.should_stop()
Path(script.checkpoint_dir(), f"rank-{rank}.pt").write_bytes(b"r")
uri = script.checkpoint(4)
dist.destroy_process_group()
print(json.dumps({"rank": rank, "before": before, "after": after, "uri": uri}))
"""
    group = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    ranks = [_rank_env(tmp_path, rank, 0, rank, (1, 1)) | group for rank in (0, 1)]
    results = _run_ranks(program, ranks)
    assert [(r["before"], r["after"]) for r in results] == [(False, True), (False, True)]
    assert not (tmp_path / "node-1" / ".sync" / "stop").exists()
    found = layout.latest_complete(open_storage(str(tmp_path / "storage")))
    assert found is not None and found.manifest is not None
    assert found.manifest.reason == "preempted"
    assert sorted(entry.path for entry in found.manifest.files) == ["rank-0.pt", "rank-1.pt"]


@pytest.mark.postgres_only
def test_without_a_process_group_every_rank_hears_a_preemption_from_the_real_api(
    settings: Settings, session, tmp_path: Path
) -> None:
    """Rank 0 from its reports' answers, rank 1 (node 1's local rank 0) by
    polling, rank 2 (node 1's other rank) from the node's stop file; each then
    saves at step 100, which the manifest says was preempted."""
    job = make_job(session, status=JobStatus.RUNNING, spec=small_spec(gpus=3))
    attempt = make_attempt(session, job.id)
    with session.begin():
        session.execute(
            update(JobAttempt)
            .where(JobAttempt.id == attempt.id)
            .values(stop_reason="preempted", stop_requested_at=utcnow())
        )
    token = attempt_token(TokenKey(settings.secret_key).get(session), attempt.id)
    program = """
import json, os, time
from pathlib import Path
from trainplane import script
rank = int(os.environ["RANK"])
step, deadline = 0, time.monotonic() + 60
while not script.should_stop():
    assert time.monotonic() < deadline, "no stop request heard"
    step += 1
    script.report({"loss": 1.0 / step}, step)
    time.sleep(0.1)
Path(script.checkpoint_dir(), f"rank-{rank}.pt").write_text(str(step))
print(json.dumps({"rank": rank, "uri": script.checkpoint(100)}))
"""
    with api_on_a_port(settings) as served:
        plane = {
            tp_env.CONTROL_PLANE_URL: str(served.advertise_url),
            tp_env.JOB_ID: job.id,
            tp_env.ATTEMPT_ID: attempt.id,
            tp_env.ATTEMPT_TOKEN: token,
        }
        layout_ = (1, 2)
        ranks = [(0, 0, 0), (1, 0, 1), (2, 1, 1)]
        results = _run_ranks(
            program, [_rank_env(tmp_path, *rank, layout_) | plane for rank in ranks]
        )
    assert results[0]["uri"] == str(tmp_path / "storage" / "step-100")
    found = layout.latest_complete(open_storage(str(tmp_path / "storage")))
    assert found is not None and found.manifest is not None
    assert (found.step, found.manifest.reason) == (100, "preempted")
    assert len(found.manifest.files) == 3
    assert (tmp_path / "node-1" / ".sync" / "stop").read_text() == "preempted"
    with session.begin():
        reported = session.scalars(
            select(JobMetric.values).where(JobMetric.attempt_id == attempt.id)
        ).all()
    assert {"loss": 1.0} in reported  # rank 0's points, flushed by the save
