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

Locations are compared once symlinks are resolved and on path segment
boundaries (storage.containment); a location with a ``.`` or ``..`` segment
or a NUL is refused outright. The rules read no file and make no S3 call, and
a refusal says the same whether or not the location exists.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from trainplane.config import Settings
from trainplane.errors import InvalidInputsError
from trainplane.jobs.spec import FinetuneSpec, TrainSpec
from trainplane.storage.backends import join
from trainplane.storage.containment import S3_SCHEME, has_dot_segments, within


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

    def in_home(self, location: str) -> bool:
        """A local path inside TRAINPLANE_HOME: the control plane's own state."""
        return os.path.isabs(location) and within(location, str(self.home))

    def on_server_paths(self, location: str) -> bool:
        """A local path an operator lets specs name (TRAINPLANE_SERVER_PATHS),
        never one inside TRAINPLANE_HOME."""
        return not self.in_home(location) and any(
            within(location, root) for root in self.server_paths
        )

    def users_own(self, location: str) -> bool:
        """``trainplane up``'s local user: their files are anywhere outside
        TRAINPLANE_HOME, and their S3 credentials are the server's."""
        if not self.local_user:
            return False
        return location.startswith(S3_SCHEME) or (
            os.path.isabs(location) and not self.in_home(location)
        )

    def working_dir_refusal(self, working_dir: str, project: str) -> str | None:
        """Why the server may not ship ``working_dir`` from its own disk; None
        when it may, or when it ships nothing (a relative path)."""
        if not os.path.isabs(working_dir):
            return None
        if bad := malformed(working_dir):
            return bad
        if self.users_own(working_dir) or self.on_server_paths(working_dir):
            return None
        if self.local_user:
            return f"'{working_dir}' is inside trainplane's own folder (TRAINPLANE_HOME)"
        return (
            f"'{working_dir}' names a folder on the server, which ships only folders "
            f"{self.server_paths_described()}; upload it instead: `trainplane submit` "
            f"does, or POST /v1/projects/{project}/bundles and set entrypoint.code"
        )

    def server_paths_described(self) -> str:
        if not self.server_paths:
            return "its operator lists in TRAINPLANE_SERVER_PATHS (none here)"
        return "under TRAINPLANE_SERVER_PATHS (" + ", ".join(self.server_paths) + ")"


def job_folder(spec: TrainSpec | FinetuneSpec, project: ProjectRef, job_id: str, root: str) -> str:
    """The job's own folder, fixed at submit: ``<checkpoint.storage>/<project>/<job-id>``
    when the spec names a storage, else ``<project root>/<job-id>``. Its
    checkpoints and exported model go below it."""
    if spec.checkpoint.storage is not None:
        return join(spec.checkpoint.storage, project.name, job_id)
    return join(root, job_id)


def malformed(location: str) -> str | None:
    """What makes ``location`` unusable as written, whatever it points at."""
    if "\x00" in location:
        return "contains a NUL character"
    if has_dot_segments(location):
        return f"'{location}' has a '.' or '..' segment; name the location without them"
    return None


def check_spec_locations(
    spec: TrainSpec | FinetuneSpec, project: ProjectRef, access: FileAccess
) -> None:
    """Raises InvalidInputsError naming each field whose location the caller
    may not use (see the module docstring)."""
    root = access.project_root(project)
    problems: list[tuple[str, str]] = []
    if isinstance(spec, TrainSpec):
        refusal = access.working_dir_refusal(spec.entrypoint.working_dir, project.name)
        if refusal:
            problems.append(("entrypoint.working_dir", refusal))
    else:
        inputs = {"base_model": spec.base_model, "dataset.train": spec.dataset.train}
        if spec.dataset.eval is not None:
            inputs["dataset.eval"] = spec.dataset.eval
        for field, location in inputs.items():
            refusal = _input_refusal(location, project, root, access)
            if refusal:
                problems.append((field, refusal))
    storage = spec.checkpoint.storage
    if storage is not None:
        refusal = _storage_refusal(storage, project, root, access)
        if refusal:
            problems.append(("checkpoint.storage", refusal))
    resume = spec.checkpoint.resume
    if resume not in ("auto", "never"):
        refusal = malformed(resume)
        if refusal is None and not (within(resume, root) or access.users_own(resume)):
            refusal = (
                f"'{resume}' is outside project {project.name}'s storage root {root}: "
                "a job resumes only from checkpoints of its own project"
            )
        if refusal:
            problems.append(("checkpoint.resume", refusal))
    if problems:
        raise InvalidInputsError(problems)


def _input_refusal(location: str, project: ProjectRef, root: str, access: FileAccess) -> str | None:
    """A fine-tune's base model or dataset: read by the server at submit, so
    only from the project's own storage, the server paths, or (``trainplane
    up``) the local user's own files."""
    if not location.startswith(S3_SCHEME) and not os.path.isabs(location):
        if access.local_user:
            return None  # the input check asks for an absolute path
        return (
            f"'{location}' is a relative path, which means nothing on the server; "
            "upload the file instead (`trainplane submit` does)"
        )
    if bad := malformed(location):
        return bad
    if within(location, root) or access.users_own(location):
        return None
    if location.startswith(S3_SCHEME):
        # The server would read it with its own credentials: any bucket they
        # reach, another project's included.
        return (
            f"'{location}' is outside project {project.name}'s storage root {root}; "
            f"the server reads S3 only there: copy it under {root}/ or upload it "
            "(`trainplane submit` does)"
        )
    if access.on_server_paths(location):
        return None
    return (
        f"'{location}' names a file on the server, which reads only files "
        f"{access.server_paths_described()} or in project {project.name}'s storage; "
        "upload it instead (`trainplane submit` uploads a fine-tune's base_model and dataset)"
    )


def _storage_refusal(
    storage: str, project: ProjectRef, root: str, access: FileAccess
) -> str | None:
    """The job's folder, ``<storage>/<project>/<job-id>``, must lie under the
    project's root (or be the local user's own folder)."""
    if bad := malformed(storage):
        return bad
    folders = join(storage, project.name)
    if within(folders, root) or access.users_own(storage):
        return None
    return (
        f"the job's folder {folders}/<job-id> would be outside project {project.name}'s "
        f"storage root {root}: leave checkpoint.storage out (job folders then go under "
        "the root) or name a folder under it"
    )


def storage_root_refusal(storage: str, others: dict[str, str], access: FileAccess) -> str | None:
    """Why ``storage`` cannot be a project's storage root; ``others`` maps
    every other project to its root. A project's specs may name anything
    under its root, so a root must hold none of the control plane's own
    state and none of another project's files."""
    if bad := malformed(storage):
        return bad
    if os.path.isabs(storage) and within(str(access.home), storage):
        return f"'{storage}' holds trainplane's own folder (TRAINPLANE_HOME)"
    default_local = not access.default_storage.startswith(S3_SCHEME)
    if access.in_home(storage) and not (default_local and within(storage, access.default_storage)):
        return (
            f"'{storage}' is inside trainplane's own folder (TRAINPLANE_HOME); "
            f"a root there must lie under the default storage {access.default_storage}"
        )
    for other, root in sorted(others.items()):
        if within(storage, root) or within(root, storage):
            return f"'{storage}' overlaps project {other}'s storage root {root}"
    return None
