"""The suite's own harness: what a failed cluster test's report carries, and
that a cluster test starts on an idle Ray head."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ray.job_submission import JobStatus, JobSubmissionClient

from tests import failure_logs
from tests.cluster_hygiene import ALIVE, HOLDING, stop_leftovers


def test_a_failure_report_carries_the_ends_of_the_logs_written_during_the_test(
    tmp_path: Path,
) -> None:
    started = time.time()
    old = tmp_path / "earlier" / "server.log"
    old.parent.mkdir()
    old.write_text("from an earlier test\n")
    os.utime(old, (started - 60, started - 60))
    server = tmp_path / "home" / "server.log"
    server.parent.mkdir()
    server.write_text("".join(f"line {n}\n" for n in range(100)))
    (tmp_path / "home" / "notes.txt").write_text("not a log")
    driver = tmp_path / "ray" / "logs" / "job-driver-raysubmit_1.log"
    driver.parent.mkdir(parents=True)
    driver.write_text("worker output\n")
    (tmp_path / "ray" / "logs" / "dashboard.log").write_text("ray's own\n")

    sections = dict(
        failure_logs.report_sections(
            [
                (tmp_path / "earlier", "*.log"),
                (tmp_path / "home", "*.log"),
                (tmp_path / "ray", "job-driver-*.log"),
            ],
            started,
        )
    )

    titles = sorted(sections)
    assert len(titles) == 2 and any(str(server) in t for t in titles), titles
    assert any(str(driver) in t for t in titles)
    text = sections[next(t for t in titles if str(server) in t)]
    lines = text.splitlines()
    assert len(lines) == failure_logs.LINES_PER_LOG and lines[-1] == "line 99"


LEFTOVER = """
import time
import ray
from ray.util.placement_group import placement_group

ray.init()
group = placement_group([{"CPU": 1}])
ray.get(group.ready())


@ray.remote(num_cpus=1)
class Worker:
    def ready(self):
        return True


@ray.remote(num_cpus=0)
class Coordinator:  # detached and free, like Ray's own coordinators
    def ready(self):
        return True


worker = Worker.remote()
coordinator = Coordinator.options(name="coordinator", lifetime="detached").remote()
ray.get([worker.ready.remote(), coordinator.ready.remote()])
print("holding", flush=True)
time.sleep(600)
"""


def test_what_an_earlier_test_left_running_on_the_head_is_stopped(ray_head, tmp_path) -> None:
    from ray.util.state import list_actors, list_placement_groups

    script = tmp_path / "leftover.py"
    script.write_text(LEFTOVER)
    client = JobSubmissionClient(ray_head.address)
    left = client.submit_job(entrypoint=f"python {script}")
    deadline = time.monotonic() + 90
    while "holding" not in client.get_job_logs(left):
        assert time.monotonic() < deadline, client.get_job_logs(left)
        assert client.get_job_status(left) in (JobStatus.PENDING, JobStatus.RUNNING)
        time.sleep(0.5)

    stopped = stop_leftovers(ray_head.address)

    assert [s.split()[0] for s in stopped] == [left]
    assert client.get_job_status(left) == JobStatus.STOPPED
    alive = list_actors(address=ray_head.address, filters=ALIVE, detail=True)
    assert [a.class_name for a in alive if not a.is_detached] == []
    groups = list_placement_groups(address=ray_head.address, detail=True)
    assert [g for g in groups if g.state in HOLDING and not g.is_detached] == []
    assert stop_leftovers(ray_head.address) == []
