"""Code bundles over the real app and database: upload, look up, name in a
spec (``entrypoint.code``), and every way a bundle or a reference is refused."""

from __future__ import annotations

import io
import zipfile

import pytest

from tests.factories import count_rows, small_spec
from trainplane.code_bundles import build_bundle, digest_of

ZIP = {"Content-Type": "application/zip"}


def _bundle(files: dict[str, str]) -> bytes:
    return build_bundle([(name, text.encode()) for name, text in files.items()])


def _code_spec(digest: str, **overrides):
    return small_spec(entrypoint={"function": "train:main", "code": digest}, gpus=1, **overrides)


def test_an_upload_is_stored_once_and_found_by_digest(api):
    data = _bundle({"train.py": "def main(ctx):\n    return 1\n", "pkg/__init__.py": ""})
    first = api.post("/v1/projects/default/bundles", content=data, headers=ZIP)
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["digest"] == digest_of(data) and body["project"] == "default"
    assert (body["size_bytes"], body["files"]) == (len(data), 2)
    assert first.headers["location"] == f"/v1/projects/default/bundles/{body['digest']}"

    again = api.post("/v1/projects/default/bundles", content=data, headers=ZIP)
    assert again.status_code == 200 and again.json() == body
    found = api.get(f"/v1/projects/default/bundles/{body['digest']}")
    assert found.status_code == 200 and found.json() == body


def test_the_same_files_make_the_same_bundle():
    one = build_bundle([("a.py", b"1"), ("b/c.py", b"2")])
    assert one == build_bundle([("b/c.py", b"2"), ("a.py", b"1")])


@pytest.mark.parametrize(
    ("content", "wanted"),
    [
        (b"not a zip at all", "not a zip archive"),
        (b"", "not a zip archive"),
    ],
)
def test_bytes_that_are_not_a_zip_are_refused_naming_the_body(api, content, wanted):
    answer = api.post("/v1/projects/default/bundles", content=content, headers=ZIP)
    assert answer.status_code == 422
    assert answer.json()["errors"][0]["field"] == "body"
    assert wanted in answer.json()["detail"]


@pytest.mark.parametrize("name", ["../evil.py", "/etc/passwd", "a/../../b.py", "a\\b.py"])
def test_paths_outside_the_bundle_are_refused(api, name):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(name, "x")
    answer = api.post("/v1/projects/default/bundles", content=buffer.getvalue(), headers=ZIP)
    assert answer.status_code == 422
    assert "relative, inside the bundle" in answer.json()["detail"]


def test_a_symlink_is_refused(api):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        link = zipfile.ZipInfo("link")
        link.external_attr = (0o120777) << 16
        archive.writestr(link, "/etc/passwd")
    answer = api.post("/v1/projects/default/bundles", content=buffer.getvalue(), headers=ZIP)
    assert answer.status_code == 422 and "plain files" in answer.json()["detail"]


def test_other_media_types_are_415_and_unknown_projects_404(api):
    data = _bundle({"a.py": ""})
    wrong = api.post(
        "/v1/projects/default/bundles", content=data, headers={"Content-Type": "text/plain"}
    )
    assert wrong.status_code == 415 and "application/zip" in wrong.json()["detail"]
    missing = api.post("/v1/projects/nope/bundles", content=data, headers=ZIP)
    assert missing.status_code == 404
    unknown = api.get(f"/v1/projects/default/bundles/{digest_of(b'other')}")
    assert unknown.status_code == 404
    malformed = api.get("/v1/projects/default/bundles/sha256:xyz")
    assert malformed.status_code == 422


def test_a_spec_runs_only_a_bundle_its_project_has(api, session):
    data = _bundle({"train.py": "def main(ctx):\n    return 1\n"})
    digest = api.post("/v1/projects/default/bundles", content=data, headers=ZIP).json()["digest"]
    before = count_rows(session)
    absent = digest_of(b"never uploaded")
    refused = api.post("/v1/jobs", json=_code_spec(absent))
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "entrypoint.code"
    assert "has no bundle" in refused.json()["detail"]
    planned = api.post("/v1/jobs/plan", json=_code_spec(absent))
    assert planned.status_code == 422
    assert count_rows(session) == before  # nothing half-written

    # Another project's bundle is not this project's.
    assert api.post("/v1/projects", json={"name": "other"}).status_code == 201
    elsewhere = api.post("/v1/jobs", json=_code_spec(digest, project="other"))
    assert elsewhere.status_code == 422

    accepted = api.post("/v1/jobs", json=_code_spec(digest))
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["spec"]["entrypoint"]["code"] == digest


@pytest.mark.parametrize(
    ("entrypoint", "wanted"),
    [
        ({"function": "t:m", "code": "sha256:abc"}, "entrypoint.code"),
        (
            {"function": "t:m", "code": "sha256:" + "0" * 64, "working_dir": "/src"},
            "working_dir out",
        ),
    ],
)
def test_malformed_code_references_are_refused(api, entrypoint, wanted):
    answer = api.post("/v1/jobs", json=small_spec(entrypoint=entrypoint, gpus=1))
    assert answer.status_code == 422
    assert wanted in answer.text
