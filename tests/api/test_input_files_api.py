"""``PUT|GET /v1/projects/{p}/inputs/{digest}`` against a real ``trainplane
server``: a fine-tune's dataset or model folder lands, content-addressed, in
the project's storage; nothing is read before the caller's role is known,
nothing is published unless every byte arrived and matches the digest, and
a zip cannot write outside its folder. Roles on both databases; what only
the storage decides on SQLite, one server for several tests."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import socket
import stat
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from trainplane.testing.server import ServerProcess

BOOTSTRAP = "inputs-bootstrap-token-0123456789"
LIMIT = 1 << 20  # TRAINPLANE_MAX_INPUT_BYTES of these servers
ROWS = b'{"text": "one"}\n{"text": "two"}\n'


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def zipped(*members: tuple[str, bytes], mode: int = stat.S_IFREG | 0o644) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in members:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            archive.writestr(info, content)
    return buffer.getvalue()


@dataclass
class Installation:
    url: str
    home: Path
    tokens: dict[str, str]

    def inputs(self, project: str = "alpha") -> Path:
        return self.home / "checkpoints" / project / "inputs"

    def put(
        self,
        data: bytes,
        *,
        as_: str = "member",
        project: str = "alpha",
        sha: str | None = None,
        kind: str = "application/octet-stream",
        **params: Any,
    ) -> httpx.Response:
        return httpx.put(
            f"{self.url}/v1/projects/{project}/inputs/{sha or digest(data)}",
            content=data,
            params=params,
            headers={**self.auth(as_), "Content-Type": kind},
            timeout=30,
        )

    def get(self, sha: str, *, as_: str = "member", project: str = "alpha") -> httpx.Response:
        return httpx.get(
            f"{self.url}/v1/projects/{project}/inputs/{sha}", headers=self.auth(as_), timeout=30
        )

    def auth(self, caller: str) -> dict[str, str]:
        secret = self.tokens.get(caller)
        return {"Authorization": f"Bearer {secret}"} if secret else {}


def installation(database_url: str, home: Path, **env: str) -> Iterator[Installation]:
    settings = {
        "TRAINPLANE_DATABASE_URL": database_url,
        "TRAINPLANE_HOME": str(home),
        "TRAINPLANE_BOOTSTRAP_TOKEN": BOOTSTRAP,
        "TRAINPLANE_MAX_INPUT_BYTES": str(LIMIT),
        **env,
    }
    log = home.parent / f"{home.name}-server.log"
    with ServerProcess(settings, args=("--no-scheduler",), log_path=log) as server:
        root = {"Authorization": f"Bearer {BOOTSTRAP}"}
        for project in ("alpha", "beta"):
            httpx.post(f"{server.url}/v1/projects", json={"name": project}, headers=root)
        tokens = {"root": BOOTSTRAP}
        for caller, project, role in [
            ("viewer", "alpha", "viewer"),
            ("member", "alpha", "member"),
            ("outsider", "beta", "member"),
        ]:
            created = httpx.post(
                f"{server.url}/v1/tokens",
                json={"name": caller, "project": project, "role": role},
                headers=root,
            )
            tokens[caller] = created.json()["token"]
        yield Installation(server.url, home, tokens)


@pytest.fixture
def on_each_database(settings, tmp_path) -> Iterator[Installation]:
    yield from installation(settings.resolved_database_url, tmp_path / "home")


@pytest.fixture(scope="module")
def shared(_sqlite_template, tmp_path_factory) -> Iterator[Installation]:
    home = tmp_path_factory.mktemp("inputs-server")
    shutil.copyfile(_sqlite_template, home / "trainplane.db")
    yield from installation(f"sqlite:///{home / 'trainplane.db'}", home)


def published(installation: Installation) -> list[str]:
    """What the project's inputs folder holds, staging aside."""
    folder = installation.inputs()
    return (
        sorted(p.name for p in folder.iterdir() if p.name != ".incoming") if folder.exists() else []
    )


def staged(installation: Installation) -> list[str]:
    folder = installation.inputs() / ".incoming"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_a_member_stores_a_file_and_a_folder_once_each(on_each_database):
    site = on_each_database
    file = site.put(ROWS, name="train.jsonl")
    assert file.status_code == 201, file.text
    hexed = digest(ROWS).removeprefix("sha256:")
    location = site.inputs() / hexed / "train.jsonl"
    assert file.json() == {
        "digest": digest(ROWS),
        "project": "alpha",
        "kind": "file",
        "location": str(location),
        "size_bytes": len(ROWS),
        "files": 1,
    }
    assert location.read_bytes() == ROWS
    assert site.get(digest(ROWS), as_="viewer").json() == file.json()

    # Known bytes are not read again: a body that is not them still answers 200.
    again = site.put(b"not these bytes", sha=digest(ROWS), name="other.jsonl")
    assert again.status_code == 200 and again.json() == file.json()

    model = zipped(("config.json", b"{}"), ("tokenizer/vocab.json", b"[1, 2]"))
    folder = site.put(model, kind="application/zip")
    assert folder.status_code == 201, folder.text
    where = Path(folder.json()["location"])
    assert where == site.inputs() / digest(model).removeprefix("sha256:")
    assert (where / "tokenizer" / "vocab.json").read_bytes() == b"[1, 2]"
    assert (folder.json()["kind"], folder.json()["files"]) == ("folder", 2)
    assert site.get(digest(model)).json()["location"] == str(where)


def test_only_members_of_the_project_upload_and_only_its_callers_look(on_each_database):
    site = on_each_database
    sha = digest(ROWS)
    assert site.put(ROWS, as_="viewer").status_code == 403
    assert site.put(ROWS, as_="outsider").status_code == 403
    assert site.put(ROWS, as_="none").status_code == 401
    assert site.put(ROWS, as_="outsider", project="nowhere").status_code == 403
    assert site.get(sha, as_="outsider").status_code == 403
    assert site.get(sha, as_="viewer").status_code == 404  # a viewer may look: nothing yet
    assert published(site) == [] and staged(site) == []
    assert site.put(ROWS, as_="outsider", project="beta").status_code == 201
    # beta's bytes are beta's: alpha has none of them.
    assert site.get(sha, as_="member").status_code == 404
    assert site.put(ROWS, as_="root", project="missing").status_code == 422


@pytest.mark.parametrize(
    ("body", "kind", "params", "field", "words"),
    [
        (zipped(("../evil.txt", b"x")), "application/zip", {}, "body", "inside the bundle"),
        (zipped(("/tmp/evil.txt", b"x")), "application/zip", {}, "body", "inside the bundle"),
        (zipped(("a/../../evil.txt", b"x")), "application/zip", {}, "body", "inside the bundle"),
        (
            zipped(("link", b"/etc/passwd"), mode=stat.S_IFLNK | 0o777),
            "application/zip",
            {},
            "body",
            "symlink",
        ),
        (b"not a zip", "application/zip", {}, "body", "not a zip archive"),
        (ROWS, "application/octet-stream", {"name": "../x"}, "name", "pattern"),
        (ROWS, "application/octet-stream", {"name": ".hidden"}, "name", "pattern"),
    ],
)
def test_a_zip_or_name_that_would_leave_its_folder_is_refused_and_leaves_nothing(
    shared, body, kind, params, field, words
):
    refused = shared.put(body, kind=kind, **params)
    assert refused.status_code == 422, refused.text
    assert field in [e["field"] for e in refused.json()["errors"]], refused.text
    assert words in refused.text
    assert published(shared) == [] and staged(shared) == []
    assert not (shared.home / "checkpoints" / "alpha" / "evil.txt").exists()
    assert not Path("/tmp/evil.txt").exists()


def test_bytes_that_do_not_match_the_digest_are_refused_and_not_published(shared):
    refused = shared.put(ROWS + b"tampered\n", sha=digest(ROWS), name="train.jsonl")
    assert refused.status_code == 422
    assert [e["field"] for e in refused.json()["errors"]] == ["digest"]
    assert published(shared) == [] and staged(shared) == []
    assert shared.get(digest(ROWS)).status_code == 404
    assert shared.put(ROWS, kind="text/plain").status_code == 415


def _raw_request(url: str, head: str, body: bytes = b"") -> socket.socket:
    parts = urlsplit(url)
    connection = socket.create_connection((parts.hostname, parts.port), timeout=10)
    connection.sendall(head.encode() + b"\r\n" + body)
    return connection


def _status(connection: socket.socket) -> int:
    answer = connection.recv(4096).decode(errors="replace")
    return int(answer.split(" ", 2)[1])


def test_an_upload_over_the_limit_is_refused_before_it_is_read(shared):
    sha = "sha256:" + "a" * 64
    started = time.monotonic()
    # Announced as 5 GiB, of which nothing is sent: the answer comes anyway.
    connection = _raw_request(
        shared.url,
        f"PUT /v1/projects/alpha/inputs/{sha} HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {shared.tokens['member']}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {5 << 30}\r\n",
    )
    with connection:
        assert _status(connection) == 413
    assert time.monotonic() - started < 5
    # Sent in chunks with no length: refused once the count passes the limit.
    chunks = (b"x" * (256 << 10) for _ in range(8))
    streamed = httpx.put(
        f"{shared.url}/v1/projects/alpha/inputs/{sha}",
        content=chunks,
        headers={**shared.auth("member"), "Content-Type": "application/octet-stream"},
        timeout=30,
    )
    assert streamed.status_code == 413
    assert published(shared) == [] and staged(shared) == []


def test_an_upload_cut_short_publishes_nothing(shared):
    data = b'{"text": "row"}\n' * 4096
    sha = digest(data)
    connection = _raw_request(
        shared.url,
        f"PUT /v1/projects/alpha/inputs/{sha}?name=train.jsonl HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {shared.tokens['member']}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {len(data)}\r\n",
        data[: len(data) // 2],
    )
    deadline = time.monotonic() + 10
    while not staged(shared) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert staged(shared), "the server never started receiving"
    connection.close()
    deadline = time.monotonic() + 10
    while staged(shared) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert staged(shared) == [] and published(shared) == []
    assert shared.get(sha).status_code == 404
    # Sent whole, the same upload is published.
    assert shared.put(data, name="train.jsonl").status_code == 201


def test_an_s3_root_holds_the_files_and_the_manifest_written_last(
    _sqlite_template, tmp_path, s3_bucket
):
    from trainplane.storage.backends import s3_client

    shutil.copyfile(_sqlite_template, tmp_path / "trainplane.db")
    database = f"sqlite:///{tmp_path / 'trainplane.db'}"
    storage = f"s3://{s3_bucket}/runs"
    for site in installation(database, tmp_path / "home", TRAINPLANE_CHECKPOINT_STORAGE=storage):
        model = zipped(("config.json", b'{"model_type": "llama"}'), ("weights/a.bin", b"\0" * 100))
        stored = site.put(model, kind="application/zip")
        assert stored.status_code == 201, stored.text
        hexed = digest(model).removeprefix("sha256:")
        assert stored.json()["location"] == f"{storage}/alpha/inputs/{hexed}"
        client = s3_client()
        keys = {
            entry["Key"]
            for entry in client.list_objects_v2(Bucket=s3_bucket, Prefix="runs/")["Contents"]
        }
        assert keys == {
            f"runs/alpha/inputs/{hexed}/config.json",
            f"runs/alpha/inputs/{hexed}/weights/a.bin",
            f"runs/alpha/inputs/{hexed}.json",
        }
        manifest = client.get_object(Bucket=s3_bucket, Key=f"runs/alpha/inputs/{hexed}.json")
        assert json.loads(manifest["Body"].read())["files"] == 2
        assert site.get(digest(model)).json() == stored.json()
