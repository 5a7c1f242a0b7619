"""A blocking call whose wait ends early cancels its job: nothing is left to
take the result. The server runs without a scheduler, so the job is QUEUED
for as long as the wait lasts, and what ends the wait is real: SIGINT (a
notebook's interrupt button sends it), or an exception raised from a signal
handler (as a test timeout does)."""

from __future__ import annotations

import signal
import threading
import time
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


def signal_once_submitted(url: str, project: str, signum: signal.Signals) -> threading.Thread:
    """Sends ``signum`` to this process once the call's job is on the server:
    ending the wait, not the upload and submission before it (which take
    their time on a busy machine). Polls through a client of its own."""

    def listed(client: Client) -> bool:
        try:
            return bool(list(client.jobs(project=project)))
        except trainplane.TrainplaneError:  # a slow answer on a busy machine: ask again
            return False

    def watch() -> None:
        # The signal is sent whatever happens here: a watcher that died
        # without sending it would leave the call waiting for the test timeout.
        try:
            with Client(url, BOOTSTRAP_TOKEN) as client:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and not listed(client):
                    time.sleep(0.1)
            time.sleep(0.3)  # into the wait
        finally:
            signal.raise_signal(signum)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def interruptible() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt, as in a notebook, whatever an earlier
    test in this process did with the handler."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_an_interrupted_call_cancels_its_job(
    user: Client, live_server, project: str, capsys: pytest.CaptureFixture[str], interruptible
) -> None:
    call = trainplane.distributed(gpus=1, project=project, client=user, progress=False)(sleeper)
    interrupter = signal_once_submitted(live_server.url, project, signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        call(5)
    interrupter.join()
    job = only_job(user, project)
    assert job.status == "CANCELLED"
    assert f"interrupted; cancelled job {job.id}" in capsys.readouterr().out


def test_a_wait_ended_by_another_exception_cancels_the_job_too(
    user: Client, admin: Client, live_server, capsys: pytest.CaptureFixture[str]
) -> None:
    project = admin.create_project("sdk-abandoned").name
    call = trainplane.distributed(gpus=1, project=project, client=user, progress=False)(sleeper)

    def give_up(signum, frame):
        raise Deadline("the caller's own deadline")

    previous = signal.signal(signal.SIGALRM, give_up)
    try:
        alarm = signal_once_submitted(live_server.url, project, signal.SIGALRM)
        with pytest.raises(Deadline):
            call(5)
        alarm.join()
    finally:
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
