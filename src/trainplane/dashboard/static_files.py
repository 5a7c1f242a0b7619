"""The dashboard's stylesheet and scripts, served at ``/static`` with a
content hash in their links so browsers may cache them for good."""

from __future__ import annotations

import functools
import hashlib
from importlib import resources

from fastapi.staticfiles import StaticFiles

STATIC_PATH = "/static"


def static_files() -> StaticFiles:
    return StaticFiles(packages=[("trainplane.dashboard", "static")])


@functools.cache
def asset_version() -> str:
    digest = hashlib.sha256()
    folder = resources.files("trainplane.dashboard") / "static"
    for item in sorted(folder.iterdir(), key=lambda f: f.name):
        if item.is_file():
            digest.update(item.name.encode())
            digest.update(item.read_bytes())
    return digest.hexdigest()[:12]
