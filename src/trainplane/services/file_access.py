"""What a spec may name on this server: its files and its storage.

The contract is DESIGN.md "Trust boundaries". A spec comes from a tenant, so
every location in it (``entrypoint.working_dir``, a fine-tune's
``base_model`` and ``dataset``, ``checkpoint.storage`` and
``checkpoint.resume``) is checked here, after the caller's role in the
spec's project is known and before anything is read or probed:

- local paths name files of the control plane's machine: ``trainplane
  server`` accepts them only under the roots an operator lists in
  ``TRAINPLANE_SERVER_PATHS``, never under ``TRAINPLANE_HOME``; ``trainplane
  up`` on loopback accepts the local user's own paths;
- each project has a storage root (``projects.storage``, default
  ``<default storage>/<project>``); a job's folder and any checkpoint it
  resumes from must lie under its own project's root.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainplane.config import Settings
from trainplane.jobs.spec import FinetuneSpec, TrainSpec
from trainplane.storage.backends import join


@dataclass(frozen=True)
class ProjectRef:
    """The project a spec names, once the caller's role in it is checked."""

    id: str
    name: str
    storage: str | None  # projects.storage; None: the default root


@dataclass(frozen=True)
class FileAccess:
    default_storage: str  # Settings.resolved_checkpoint_storage
    home: Path  # TRAINPLANE_HOME: the control plane's own state
    server_paths: tuple[str, ...]  # TRAINPLANE_SERVER_PATHS
    # `trainplane up` on loopback: the one local user submits, and the paths
    # in their specs are their own files.
    local_user: bool = False

    @classmethod
    def from_settings(cls, settings: Settings, *, local_user: bool = False) -> FileAccess:
        return cls(
            default_storage=settings.resolved_checkpoint_storage,
            home=settings.home.absolute(),
            server_paths=settings.server_path_roots,
            local_user=local_user,
        )

    def project_root(self, project: ProjectRef) -> str:
        """The folder (or S3 prefix) every job folder of ``project`` lies under."""
        return project.storage or join(self.default_storage, project.name)


def job_folder(spec: TrainSpec | FinetuneSpec, project: ProjectRef, job_id: str, root: str) -> str:
    """The job's own folder, fixed at submit: ``<checkpoint.storage>/<project>/<job-id>``
    when the spec names a storage, else ``<project root>/<job-id>``. Its
    checkpoints and exported model go below it."""
    if spec.checkpoint.storage is not None:
        return join(spec.checkpoint.storage, project.name, job_id)
    return join(root, job_id)


def check_spec_locations(
    spec: TrainSpec | FinetuneSpec, project: ProjectRef, access: FileAccess
) -> None:
    """Raises InvalidInputsError naming each field whose location the caller
    may not use (see the module docstring)."""
    # Filled in by the server-path and storage-root rules.
    return None
