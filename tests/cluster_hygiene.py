"""Each test module starts on an idle Ray head.

The session's head is shared, and a test's own server stops when the test
ends while a job it launched may still be running on Ray (a test that timed
out, or one that asserts on a job midway). Such a job holds the head's
worker slots, and the next module's jobs would wait for them until their
own timeouts, failing tests that did nothing wrong. So after each module
whatever is still running is stopped, and a warning names the module that
left it."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

ALIVE = [("state", "=", "ALIVE")]
# A placement group in any of these holds (or is about to hold) worker slots.
HOLDING = ("PENDING", "CREATED", "RESCHEDULING")


class ClusterNotIdle(RuntimeError):
    pass


def stop_leftovers(address: str, *, timeout: float = 90) -> list[str]:
    """Stops every unfinished Ray job on the head at ``address`` and waits
    until what they held is free; returns the stopped jobs' descriptions.
    Detached actors and placement groups are Ray's own (an autoscaling
    coordinator lives as long as the cluster) and are not waited for."""
    from ray.job_submission import JobSubmissionClient
    from ray.util.state import list_actors, list_placement_groups

    client = JobSubmissionClient(address)
    running = [job for job in client.list_jobs() if not job.status.is_terminal()]
    for job in running:
        client.stop_job(job.submission_id)
    deadline = time.monotonic() + timeout
    while True:
        unfinished = [
            job.submission_id
            for job in client.list_jobs()
            if job.submission_id and not job.status.is_terminal()
        ]
        actors = [
            f"{actor.class_name} (job {actor.job_id}, pid {actor.pid})"
            for actor in list_actors(address=address, filters=ALIVE, detail=True)
            if not actor.is_detached
        ]
        groups = [
            f"{group.placement_group_id} (job {group.creator_job_id})"
            for group in list_placement_groups(address=address, detail=True)
            if group.state in HOLDING and not group.is_detached
        ]
        if not (unfinished or actors or groups):
            return [f"{job.submission_id} ({job.entrypoint[:80]})" for job in running]
        if time.monotonic() > deadline:
            raise ClusterNotIdle(
                f"the Ray head is still busy {timeout:.0f}s after stopping what was left: "
                f"jobs {unfinished}, actors {actors}, placement groups {groups}; "
                f"drivers: {_drivers(client)}"
            )
        time.sleep(0.5)


def _drivers(client: JobSubmissionClient) -> list[str]:
    """Each submitted job's Ray job id, status and whether its driver process
    still exists (the head is local), to match the leftovers' job ids with: a
    driver that outlived its STOPPED job once held a gang's actors this way."""
    described = []
    for job in client.list_jobs():
        pid = (job.driver_info.pid if job.driver_info else None) or ""
        alive = ""
        if pid:
            try:
                os.kill(int(pid), 0)
                alive = " driver alive"
            except (ProcessLookupError, PermissionError, ValueError):
                alive = " driver gone"
        described.append(f"{job.job_id}={job.status} pid {pid}{alive}")
    return described
