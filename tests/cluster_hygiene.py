"""Each test module starts on an idle Ray head.

The session's head is shared, and a test's own server stops when the test
ends while a job it launched may still be running on Ray (a test that timed
out, or one that asserts on a job midway). Such a job holds the head's
worker slots, and the next module's jobs would wait for them until their
own timeouts, failing tests that did nothing wrong. So after each module
whatever is still running is stopped, and a warning names the module that
left it."""

from __future__ import annotations

import time

ALIVE = [("state", "=", "ALIVE")]


class ClusterNotIdle(RuntimeError):
    pass


def stop_leftovers(address: str, *, timeout: float = 90) -> list[str]:
    """Stops every unfinished Ray job on the head at ``address`` and waits
    until no actor is alive; returns the stopped jobs' descriptions."""
    from ray.job_submission import JobSubmissionClient
    from ray.util.state import list_actors

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
        alive = [actor.class_name for actor in list_actors(address=address, filters=ALIVE)]
        if not unfinished and not alive:
            return [f"{job.submission_id} ({job.entrypoint[:80]})" for job in running]
        if time.monotonic() > deadline:
            raise ClusterNotIdle(
                f"the Ray head is still busy {timeout:.0f}s after stopping what was left: "
                f"jobs {unfinished}, actors {alive}"
            )
        time.sleep(0.5)
