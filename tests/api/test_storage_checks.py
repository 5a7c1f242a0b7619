"""Checkpoint storage is checked at submit and plan time against an S3 API
that authenticates (moto's server with IAM enforcement, on 127.0.0.1): a
missing bucket or wrong credentials is a 422 naming ``checkpoint.storage``,
and nothing is queued. Only storage under the project's root is probed, so
each test first puts the project's root in the bucket it names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import httpx
import pytest
from fastapi.testclient import TestClient

from tests.factories import count_rows, make_cluster, small_spec
from trainplane.api.app import create_app
from trainplane.net import free_port

# moto answers this many requests before it starts checking credentials:
# enough to create the user, its key and its policy.
UNAUTHENTICATED_SETUP_REQUESTS = 3


@dataclass(frozen=True)
class AuthenticatingS3:
    endpoint: str
    key_id: str
    secret: str
    bucket: str


@pytest.fixture(scope="module")
def authenticating_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthenticatingS3]:
    port = free_port()
    log = open(tmp_path_factory.mktemp("moto-auth") / "moto.log", "wb")  # noqa: SIM115
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(UNAUTHENTICATED_SETUP_REQUESTS)}
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while server.poll() is None and time.monotonic() < deadline:
            try:
                # Not an S3 or IAM request: does not use up the free ones.
                httpx.get(f"{endpoint}/moto-api/", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        setup = {"endpoint_url": endpoint, "region_name": "us-east-1"}
        anyone = {"aws_access_key_id": "setup", "aws_secret_access_key": "setup"}
        iam = boto3.client("iam", **setup, **anyone)
        iam.create_user(UserName="trainer")
        key = iam.create_access_key(UserName="trainer")["AccessKey"]
        allow_s3 = {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}
        policy = {"Version": "2012-10-17", "Statement": [allow_s3]}
        iam.put_user_policy(UserName="trainer", PolicyName="s3", PolicyDocument=json.dumps(policy))
        bucket = f"ckpt-{uuid.uuid4().hex[:8]}"
        owner = {
            "aws_access_key_id": key["AccessKeyId"],
            "aws_secret_access_key": key["SecretAccessKey"],
        }
        boto3.client("s3", **setup, **owner).create_bucket(Bucket=bucket)
        yield AuthenticatingS3(endpoint, key["AccessKeyId"], key["SecretAccessKey"], bucket)
    finally:
        server.terminate()
        server.wait(10)
        log.close()


def _use(monkeypatch: pytest.MonkeyPatch, s3: AuthenticatingS3, key_id: str, secret: str) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


def _spec(storage: str) -> dict:
    return small_spec("s3-job", gpus=1, checkpoint={"every_steps": 10, "storage": storage})


def _root(api: TestClient, bucket: str) -> None:
    """The project keeps its files in ``bucket``: only there may a spec name
    a storage, so only there is a storage probed."""
    answer = api.patch("/v1/projects/default", json={"storage": f"s3://{bucket}"})
    assert answer.status_code == 200, answer.text


def _refused(api: TestClient, storage: str) -> str:
    """Both submit and plan refuse the spec; returns the message."""
    messages = []
    for path in ("/v1/jobs", "/v1/jobs/plan"):
        answer = api.post(path, json=_spec(storage))
        assert answer.status_code == 422, answer.text
        (error,) = answer.json()["errors"]
        assert error["field"] == "checkpoint.storage"
        messages.append(error["message"])
    assert messages[0] == messages[1]
    return messages[0]


def test_a_writable_bucket_is_accepted_and_the_check_leaves_nothing(
    api, session, authenticating_s3, monkeypatch
):
    s3 = authenticating_s3
    _use(monkeypatch, s3, s3.key_id, s3.secret)
    make_cluster(session, gpus=2)
    _root(api, s3.bucket)
    storage = f"s3://{s3.bucket}/accepted"
    assert api.post("/v1/jobs/plan", json=_spec(storage)).status_code == 200
    assert api.post("/v1/jobs", json=_spec(storage)).status_code == 201
    client = boto3.client(
        "s3",
        endpoint_url=s3.endpoint,
        region_name="us-east-1",
        aws_access_key_id=s3.key_id,
        aws_secret_access_key=s3.secret,
    )
    assert client.list_objects_v2(Bucket=s3.bucket).get("KeyCount") == 0


def test_a_missing_bucket_is_refused_naming_the_field(api, session, authenticating_s3, monkeypatch):
    s3 = authenticating_s3
    _use(monkeypatch, s3, s3.key_id, s3.secret)
    make_cluster(session, gpus=2)
    _root(api, "no-such-bucket-here")
    before = count_rows(session)
    message = _refused(api, "s3://no-such-bucket-here/ckpt")
    assert message == "s3://no-such-bucket-here/ckpt: bucket 'no-such-bucket-here' does not exist"
    assert count_rows(session) == before


@pytest.mark.parametrize(
    ("wrong", "code"), [("key", "InvalidAccessKeyId"), ("secret", "SignatureDoesNotMatch")]
)
def test_wrong_credentials_are_refused_naming_the_field(
    api, session, authenticating_s3, monkeypatch, wrong, code
):
    s3 = authenticating_s3
    key_id = "AKIAWRONGWRONGWRONG0" if wrong == "key" else s3.key_id
    secret = "not-the-secret" if wrong == "secret" else s3.secret
    _use(monkeypatch, s3, key_id, secret)
    make_cluster(session, gpus=2)
    _root(api, s3.bucket)
    before = count_rows(session)
    # A prefix of its own: a success elsewhere is remembered for a minute.
    storage = f"s3://{s3.bucket}/wrong-{wrong}"
    message = _refused(api, storage)
    assert message == (
        f"{storage}: S3 refused to let these credentials write to bucket '{s3.bucket}' ({code})"
    )
    assert count_rows(session) == before


def test_an_unusable_server_default_storage_is_an_upstream_error(
    settings, session, authenticating_s3, monkeypatch
):
    s3 = authenticating_s3
    _use(monkeypatch, s3, s3.key_id, s3.secret)
    broken = settings.model_copy(update={"checkpoint_storage": "s3://missing-default/ckpt"})
    make_cluster(session, gpus=2)
    with TestClient(create_app(broken)) as api:
        answer = api.post("/v1/jobs", json=small_spec("default", gpus=1))
    assert answer.status_code == 502
    assert "the project's checkpoint storage is not usable" in answer.json()["detail"]
    assert "bucket 'missing-default' does not exist" in answer.json()["detail"]


def test_a_bucket_outside_the_projects_root_is_refused_without_a_probe(
    api, session, authenticating_s3, monkeypatch
):
    s3 = authenticating_s3
    # Credentials S3 would refuse: a probe would have answered with that.
    _use(monkeypatch, s3, "AKIAWRONGWRONGWRONG0", "not-the-secret")
    make_cluster(session, gpus=2)
    message = _refused(api, f"s3://{s3.bucket}/someone-else")
    assert message.startswith(f"the job's folder s3://{s3.bucket}/someone-else/default/<job-id>")
    assert "outside project default's storage root" in message and "S3" not in message
