"""Which checkpoint an attempt resumes from (``checkpoint.resume``), decided
once per attempt: by rank 0 of a train function (runtime.checkpointing) and
by the driver of a script, which imports no torch for it.
"""

from __future__ import annotations

from collections.abc import Callable

from trainplane.jobs.spec import Checkpoint
from trainplane.storage import checkpoints as layout
from trainplane.storage.backends import Storage, StorageError, open_storage


def choose_resume_point(
    policy: Checkpoint, storage: Storage | None, log: Callable[[str], None] = print
) -> tuple[str, str] | None:
    """(storage URI, folder name) of the checkpoint an attempt resumes from,
    by ``policy.resume``: the latest complete one of the job's own ``storage``,
    else the complete checkpoint ``resume`` names; None to start fresh.
    Unfinished folders of ``storage`` are removed on the way. Called once per
    attempt (rank 0 of a train function, the driver of a script)."""
    if policy.resume == "never":
        return None
    if storage is not None:
        folders = layout.scan(storage)
        for folder in folders:
            if not folder.complete:
                log(f"trainplane: removing unfinished checkpoint {folder.name}")
                layout.remove(storage, folder.name)
        complete = [folder for folder in folders if folder.complete]
        if complete:
            return storage.uri, complete[-1].name
    if policy.resume not in ("auto", "never"):
        # A checkpoint of another job (or an earlier run) to start from.
        parent, _, name = policy.resume.rstrip("/").rpartition("/")
        other = open_storage(parent)
        found = layout.inspect(other, name)
        if found is None or not found.complete:
            raise StorageError(f"checkpoint.resume {policy.resume} is not a complete checkpoint")
        return other.uri, name
    return None
