"""The checkpoint disk fills up during training: the save in progress fails
(no half-written checkpoint is ever listed or resumed from), the previous
checkpoint stays usable (the next attempt resumes from it), and the job
ends FAILED with the storage error as its reason.

The disk is a small tmpfs mounted for the test, which needs root: a real
filesystem running out of space, not an injected exception."""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.conftest import server_env
from tests.runtime.test_training import Service
from tests.scheduler.conftest import register_local, wait_for
from trainplane.testing.server import ServerProcess

pytestmark = pytest.mark.postgres_only


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    assert mounted.returncode == 0, f"this test mounts a tmpfs, as root: {mounted.stderr}"
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=True)


def fill(disk: Path) -> int:
    """Writes a file until the disk has no space left; its size in bytes."""
    chunk = b"\0" * (256 * 1024)
    written = 0
    with open(disk / "filler", "wb", buffering=0) as filler:
        try:
            while True:
                written += filler.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return written


@pytest.fixture
def service(
    db_url: str, ray_head, s3_endpoint: str, tmp_path: Path, small_disk: Path
) -> Iterator[Service]:
    register_local(db_url, ray_head.address)
    home = tmp_path / "home"
    # The small disk is the server's checkpoint storage: each project's
    # root, and so each job's folder, lies on it.
    env = server_env(db_url, home, TRAINPLANE_CHECKPOINT_STORAGE=str(small_disk))
    with ServerProcess(env, log_path=tmp_path / "server.log") as server:
        yield Service(server.url, home, s3_endpoint)


def test_a_full_checkpoint_disk_keeps_the_last_checkpoint_and_fails_the_job_with_the_reason(
    service: Service, small_disk: Path
) -> None:
    # One worker: the same checkpointing as a gang's, without a Ray Train
    # group to start for each attempt.
    job_id = service.submit(
        "ddp",
        sleep=0.2,
        resources={"gpus": 1},
        checkpoint={"every_steps": 10, "keep_last": 3},
        retries={"max_restarts": 1, "backoff_seconds": 0},
    )

    def listed() -> list[int]:
        found = service.http.get(f"/v1/jobs/{job_id}/checkpoints").json()["checkpoints"]
        return sorted(c["step"] for c in found)

    wait_for(lambda: listed() == [10], 180, "the first checkpoint")
    assert fill(small_disk) > 0
    detail = service.wait(job_id)
    logs = service.logs(job_id)
    assert detail["status"] == "FAILED", logs[-3000:]
    assert "checkpoint step 20 was not saved" in detail["reason"], detail["reason"]
    assert "No space left on device" in detail["reason"], detail["reason"]
    # Nothing half-written is listed; the checkpoint before it stays, and the
    # second attempt, after the failed save, resumed from it.
    assert listed() == [10]
    assert [a["status"] for a in detail["attempts"]] == ["FAILED", "FAILED"]
    second = service.http.get(f"/v1/jobs/{job_id}/logs", params={"attempt": 2}).text
    assert "trainplane: resumed from checkpoint step 10" in second, second[-3000:]
    # Step 20 trained, then its save failed: no step went past it.
    assert max(service.losses(job_id)) == 20
