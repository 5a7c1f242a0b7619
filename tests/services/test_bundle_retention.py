"""Code bundles are deleted once no unfinished job names them and nobody has
used them for the retention period; the scheduler's unpacked copies go
sooner, and come back from the database when a launch needs them. On the
real app and database (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import time
from datetime import timedelta

from sqlalchemy import select, update

from tests.factories import small_spec
from trainplane.code_bundles import build_bundle
from trainplane.db.base import utcnow
from trainplane.db.models import CodeBundle
from trainplane.scheduler.code import BundleFolders
from trainplane.scheduler.loop import Scheduler
from trainplane.services.bundles import delete_unused_bundles

ZIP = {"Content-Type": "application/zip"}
WEEK = timedelta(days=7)


def upload(api, text: str) -> str:
    data = build_bundle([("train.py", f"def main(ctx):\n    return {text!r}\n".encode())])
    answer = api.post("/v1/projects/default/bundles", content=data, headers=ZIP)
    assert answer.is_success, answer.text
    return answer.json()["digest"]


def submit(api, digest: str) -> str:
    spec = small_spec(entrypoint={"function": "train:main", "code": digest}, gpus=1)
    answer = api.post("/v1/jobs", json=spec)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def age(session, digest: str, days: float = 8) -> None:
    with session.begin():
        session.execute(
            update(CodeBundle)
            .where(CodeBundle.digest == digest)
            .values(last_used_at=utcnow() - timedelta(days=days))
        )


def exists(api, digest: str) -> bool:
    return api.get(f"/v1/projects/default/bundles/{digest}").status_code == 200


def test_only_old_bundles_no_unfinished_job_names_are_deleted(api, session):
    queued, cancelled, unused, recent = (upload(api, n) for n in ("q", "c", "u", "r"))
    submit(api, queued)
    job = submit(api, cancelled)
    assert api.post(f"/v1/jobs/{job}/cancel").json()["status"] == "CANCELLED"
    for digest in (queued, cancelled, unused):
        age(session, digest)

    assert delete_unused_bundles(session, utcnow(), WEEK) == 2

    assert [exists(api, d) for d in (queued, cancelled, unused, recent)] == [
        True,
        False,
        False,
        True,
    ]
    assert delete_unused_bundles(session, utcnow(), WEEK) == 0


def test_uploading_again_or_submitting_keeps_a_bundle(api, session):
    uploaded, submitted = upload(api, "u"), upload(api, "s")
    age(session, uploaded)
    age(session, submitted)
    upload(api, "u")  # the same bytes again
    job = submit(api, submitted)
    api.post(f"/v1/jobs/{job}/cancel")  # ended: only its recent use keeps the bundle

    assert delete_unused_bundles(session, utcnow(), WEEK) == 0
    with session.begin():
        used = session.scalars(select(CodeBundle.last_used_at)).all()
    assert all(utcnow() - at < timedelta(minutes=5) for at in used)


def test_unpacked_copies_no_launch_used_lately_are_removed_and_come_back(api, sessions, tmp_path):
    folders = BundleFolders(sessions, cache_dir=tmp_path / "cache")
    idle, busy = upload(api, "idle"), upload(api, "busy")
    idle_folder = folders.folder("default", idle)
    busy_folder = folders.folder("default", busy)
    an_hour_ago = time.time() - 3700
    os.utime(idle_folder, (an_hour_ago, an_hour_ago))
    os.utime(busy_folder, (an_hour_ago, an_hour_ago))
    assert folders.folder("default", busy) == busy_folder  # a launch uses it again

    assert folders.prune(idle_for=timedelta(hours=1)) == 1

    assert not os.path.exists(idle_folder) and os.path.isdir(busy_folder)
    assert folders.folder("default", idle) == idle_folder  # unpacked again from the database
    assert os.path.isfile(os.path.join(idle_folder, "train.py"))


def test_the_scheduler_sweeps_with_the_configured_retention(api, settings, sessions, session):
    old, fresh = upload(api, "old"), upload(api, "fresh")
    age(session, old, days=2)
    age(session, fresh, days=0.5)
    scheduler = Scheduler(settings.model_copy(update={"bundle_retention_days": 1}), sessions)
    try:
        scheduler.sweep_bundles()
    finally:
        scheduler.pool.shutdown()
    assert (exists(api, old), exists(api, fresh)) == (False, True)
