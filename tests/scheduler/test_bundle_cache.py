"""The unpacked code bundles live in the installation's private cache
(``<home>/cache/bundles``, 0700), and a cached folder is shipped only while
its files are the ones unpacked: one changed, added to, linked elsewhere or
planted without its record is replaced from the database before a launch.
Real app and database (SQLite and PostgreSQL), real files."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.services.test_bundle_retention import upload
from trainplane.code_bundles import bundle_folder
from trainplane.scheduler.code import BundleFolders, bundle_cache_dir, tree_digest
from trainplane.scheduler.loop import Scheduler

pytestmark = pytest.mark.ray_free

ORIGINAL = "def main(ctx):\n    return 'tampered'\n"  # what upload(api, "tampered") holds


@pytest.fixture
def folders(sessions, settings) -> BundleFolders:
    return BundleFolders(sessions, bundle_cache_dir(settings))


def test_the_cache_is_private_and_under_the_installations_home(api, folders, settings):
    digest = upload(api, "private")
    folder = Path(folders.folder("default", digest))
    cache = settings.home / "cache" / "bundles"
    assert folder.parent == cache
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert (folder / "train.py").is_file()
    # The scheduler itself uses that folder, not a shared /tmp one.
    scheduler = Scheduler(settings, folders.sessions)
    try:
        assert scheduler.bundles.cache_dir == cache
    finally:
        scheduler.pool.shutdown()


def test_an_intact_folder_is_reused_as_it_is(api, folders):
    digest = upload(api, "reused")
    folder = Path(folders.folder("default", digest))
    marker = folder / "train.py"
    before = marker.stat().st_ino
    assert folders.folder("default", digest) == str(folder)
    assert marker.stat().st_ino == before  # not unpacked again


def _tamper_content(folder: Path) -> None:
    (folder / "train.py").write_text("import os; os.system('steal')\n")


def _tamper_extra_file(folder: Path) -> None:
    (folder / "sitecustomize.py").write_text("import os; os.system('steal')\n")


def _tamper_symlink(folder: Path) -> None:
    (folder / "train.py").unlink()
    (folder / "train.py").symlink_to("/etc/passwd")


def _tamper_mode(folder: Path) -> None:
    (folder / "train.py").chmod(0o755)


@pytest.mark.parametrize(
    "tamper",
    [_tamper_content, _tamper_extra_file, _tamper_symlink, _tamper_mode],
    ids=["changed file", "added file", "symlink", "execute bit"],
)
def test_a_tampered_folder_is_replaced_before_it_is_used(api, folders, tamper):
    digest = upload(api, "tampered")
    folder = Path(folders.folder("default", digest))
    expected = tree_digest(folder)
    tamper(folder)
    assert tree_digest(folder) != expected

    again = Path(folders.folder("default", digest))

    assert again == folder and tree_digest(again) == expected
    assert (again / "train.py").read_text() == ORIGINAL
    assert not (again / "train.py").is_symlink()
    assert sorted(p.name for p in again.iterdir()) == ["train.py"]


def test_a_planted_folder_without_its_record_is_not_trusted(api, folders):
    digest = upload(api, "planted")
    planted = bundle_folder(folders.cache_dir, digest)
    planted.mkdir(parents=True)
    (planted / "train.py").write_text("print('not the uploaded code')\n")

    used = Path(folders.folder("default", digest))

    assert used == planted
    assert (used / "train.py").read_text() == "def main(ctx):\n    return 'planted'\n"
