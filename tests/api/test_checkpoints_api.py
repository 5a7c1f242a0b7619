"""``GET /v1/jobs/{id}/checkpoints`` over real checkpoint folders in a temp
storage: only folders with a valid manifest are listed, newest step first."""

from __future__ import annotations

import hashlib

from tests.factories import make_job, small_spec
from trainplane.jobs.spec import load_spec
from trainplane.services.locations import checkpoint_root
from trainplane.storage.backends import LocalStorage
from trainplane.storage.checkpoints import FileEntry, Manifest, write_manifest


def _save(storage, step, files, *, manifest=True, listed=None):
    """Write ``files`` into step-<step>/ and, last, a manifest listing
    ``listed`` (default: the files written)."""
    for path, data in files.items():
        storage.write_bytes(f"step-{step}/{path}", data)
    if not manifest:
        return
    entries = [
        FileEntry(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest())
        for path, data in (listed or files).items()
    ]
    write_manifest(
        storage,
        Manifest(
            step=step,
            metrics={"eval_loss": 1.0 / step},
            strategy="ddp",
            format="state-dict",
            world_size=2,
            files=entries,
            attempt_id="attempt-1",
        ),
    )


def test_only_complete_checkpoints_are_listed_newest_first(api, session, tmp_path):
    storage_root = str(tmp_path / "ckpt")
    job = make_job(session, spec=small_spec(gpus=1, checkpoint={"storage": storage_root}))
    root = checkpoint_root(job.folder, load_spec(job.spec), "default", job.id, "/unused")
    assert root == f"{storage_root}/default/{job.id}/checkpoints"
    storage = LocalStorage(root)
    weights = {"model.pt": b"w" * 1000, "optim.pt": b"o" * 300}
    _save(storage, 5, weights)
    _save(storage, 10, weights)
    _save(storage, 20, weights, manifest=False)  # the save died before its manifest
    _save(storage, 30, {"model.pt": b"w"}, listed=weights)  # a file is missing

    response = api.get(f"/v1/jobs/{job.id}/checkpoints")

    assert response.status_code == 200, response.text
    listing = response.json()
    assert listing["job_id"] == job.id and listing["storage"] == root
    assert [c["step"] for c in listing["checkpoints"]] == [10, 5]
    newest = listing["checkpoints"][0]
    assert newest["uri"] == f"{root}/step-10"
    assert newest["size_bytes"] == 1300 and newest["files"] == 2
    assert (newest["strategy"], newest["format"], newest["world_size"]) == ("ddp", "state-dict", 2)
    assert newest["metrics"] == {"eval_loss": 0.1}
    assert newest["attempt_id"] == "attempt-1" and newest["created_at"]


def test_a_job_without_checkpoints_yet_has_an_empty_list_under_the_default_storage(
    api, session, settings
):
    job = make_job(session, spec=small_spec(gpus=1))
    listing = api.get(f"/v1/jobs/{job.id}/checkpoints").json()
    default = settings.home / "checkpoints"
    assert listing == {
        "job_id": job.id,
        "storage": f"{default}/default/{job.id}/checkpoints",
        "checkpoints": [],
    }


def test_unreadable_storage_is_502_naming_it(api, session, tmp_path):
    storage_root = str(tmp_path / "ckpt")
    job = make_job(session, spec=small_spec(gpus=1, checkpoint={"storage": storage_root}))
    root = checkpoint_root(job.folder, load_spec(job.spec), "default", job.id, "/unused")
    # A manifest that cannot be read (a folder where the file should be).
    (tmp_path / "ckpt" / "default" / job.id / "checkpoints" / "step-7" / "manifest.json").mkdir(
        parents=True
    )
    response = api.get(f"/v1/jobs/{job.id}/checkpoints")
    assert response.status_code == 502
    assert response.headers["content-type"].startswith("application/problem+json")
    assert root in response.json()["detail"]


def test_checkpoints_of_an_unknown_job_are_404(api):
    assert api.get("/v1/jobs/nope/checkpoints").status_code == 404
