"""Code bundles as folders the Ray Jobs API can ship: a job with
``entrypoint.code`` runs in its bundle, unpacked here once per digest."""

from __future__ import annotations

import tempfile
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from trainplane.code_bundles import BundleError, bundle_folder, unpack_bundle
from trainplane.scheduler.launch import LaunchError
from trainplane.services.bundles import bundle_content


class BundleFolders:
    def __init__(self, sessions: sessionmaker[Session], cache_dir: Path | None = None) -> None:
        self.sessions = sessions
        # Unpacked bundles are a cache, rebuilt from the database at will.
        self.cache_dir = cache_dir or Path(tempfile.gettempdir()) / "trainplane-bundles"

    def folder(self, project: str, digest: str) -> str:
        cached = bundle_folder(self.cache_dir, digest)
        if cached.is_dir():
            return str(cached)
        with self.sessions() as session:
            data = bundle_content(session, project, digest)
        if data is None:
            raise LaunchError(f"entrypoint.code: project '{project}' no longer has bundle {digest}")
        try:
            return str(unpack_bundle(data, self.cache_dir))
        except (BundleError, OSError) as exc:
            raise LaunchError(
                f"entrypoint.code: bundle {digest} cannot be unpacked: {exc}"
            ) from exc
