"""Runtime fixtures: a real S3 API (moto's server on 127.0.0.1) and a one-rank
gloo process group in the test process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch.distributed as dist

from trainplane.net import free_port


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
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
        os.environ.pop("TRAINPLANE_DEVICE", None)
