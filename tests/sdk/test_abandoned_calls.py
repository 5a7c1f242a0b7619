"""A blocking call whose wait ends early cancels its job: nothing is left to
take the result. The server runs without a scheduler, so the job is QUEUED
for as long as the wait lasts, and what ends the wait is real: SIGINT (a
notebook's interrupt button sends it), or an exception raised from a signal
handler (as a test timeout does)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest

import trainplane
from tests.fuzz.live_server import BOOTSTRAP_TOKEN
from trainplane.sdk.client import Client
from trainplane.sdk.errors import WaitTimeout


class Deadline(Exception):
    pass


def sleeper(ctx, seconds: int) -> int:
    return seconds


@pytest.fixture
def user(live_server) -> Iterator[Client]:
    with Client(live_server.url, BOOTSTRAP_TOKEN) as client:
        yield client


def only_job(client: Client, project: str):
    [job] = list(client.jobs(project=project))
    return job


def test_an_interrupted_call_cancels_its_job(
    user: Client, project: str, capsys: pytest.CaptureFixture[str]
) -> None:
    call = trainplane.distributed(gpus=1, project=project, client=user, progress=False)(sleeper)
    threading.Timer(1.5, signal.raise_signal, (signal.SIGINT,)).start()
    with pytest.raises(KeyboardInterrupt):
        call(5)
    job = only_job(user, project)
    assert job.status == "CANCELLED"
    assert f"interrupted; cancelled job {job.id}" in capsys.readouterr().out


def test_a_wait_ended_by_another_exception_cancels_the_job_too(
    user: Client, admin: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    project = admin.create_project("sdk-abandoned").name
    call = trainplane.distributed(gpus=1, project=project, client=user, progress=False)(sleeper)

    def give_up(signum, frame):
        raise Deadline("the caller's own deadline")

    previous = signal.signal(signal.SIGALRM, give_up)
    signal.setitimer(signal.ITIMER_REAL, 1.5)
    try:
        with pytest.raises(Deadline):
            call(5)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    job = only_job(user, project)
    assert job.status == "CANCELLED"
    assert f"Deadline; cancelled job {job.id}" in capsys.readouterr().out


def test_a_submitted_call_whose_wait_times_out_goes_on(user: Client, admin: Client) -> None:
    """With submit(), the caller keeps the handle: a timeout is not abandoning it."""
    project = admin.create_project("sdk-timeout").name
    remote = trainplane.distributed(gpus=1, project=project, client=user, progress=False)(
        sleeper
    ).submit(5)
    with pytest.raises(WaitTimeout):
        remote.wait(timeout=1)
    assert user.job(remote.job_id).status == "QUEUED"
    user.cancel(remote.job_id)
