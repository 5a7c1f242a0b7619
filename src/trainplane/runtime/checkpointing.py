"""Saving and resuming a job's checkpoints by its policy.

Every rank writes its files into a staging folder of its own, then publishes
them to the job's storage (a rename on a local filesystem, an upload to S3),
recording sizes and SHA-256 checksums. Rank 0 gathers every rank's file list
and writes the manifest last. The storage, not Ray Train's bookkeeping, decides
which checkpoints exist: a folder without a valid manifest is never resumed
from and is removed by the next save or resume.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainplane.jobs.spec import Checkpoint
from trainplane.runtime import rng
from trainplane.runtime.collective import barrier, broadcast, gather
from trainplane.runtime.resume_points import choose_resume_point
from trainplane.runtime.safe_loading import check_loadable, load_file
from trainplane.storage import checkpoints as layout
from trainplane.storage import files
from trainplane.storage.backends import LocalStorage, Storage, StorageError, open_storage

RNG_FILE = "trainer/rng-rank-{rank}.pt"
# Under this much free space, a failed local save is put down to a full disk.
LOW_SPACE_BYTES = 1024 * 1024
STATE_FILE = "trainer/state.pt"
TRAINER_STATE = f"{STATE_FILE} (ctx.state, the LR scheduler and the data loaders' positions)"


@dataclass(frozen=True)
class Resumed:
    step: int
    uri: str
    trainer_state: dict[str, Any]


class Checkpointer:
    """One per TrainContext. Every method is collective: call it on all ranks."""

    def __init__(
        self,
        root: str | None,
        policy: Checkpoint,  # the spec's checkpoint section
        *,
        rank: int,
        world_size: int,
        strategy: str,
        job_id: str | None,
        attempt_id: str | None,
        log: Callable[[str], None] = print,
    ) -> None:
        self.root = root
        self.policy = policy
        self.rank = rank
        self.world_size = world_size
        self.strategy = strategy
        self.job_id = job_id
        self.attempt_id = attempt_id
        self.log = log
        self.storage: Storage | None = open_storage(root) if root else None
        self.last_save_time = time.monotonic()
        self._scratch: Path | None = None

    # --- when -------------------------------------------------------------------
    def due_by_steps(self, previous: int, step: int) -> bool:
        """Whether ``every_steps`` asks for a save at ``step``, the last policy
        save (or resume) having been at ``previous``. Same answer on every rank,
        without asking the others."""
        if self.storage is None or step <= previous:
            return False
        every = self.policy.every_steps
        return bool(every) and step // every > previous // every

    def due_by_time(self) -> bool:
        """Whether ``every_minutes`` have passed since the last save, by this
        rank's clock. Clocks differ per rank: rank 0's answer is the one that
        counts, shared when the ranks next meet (runtime.step_sync)."""
        if self.storage is None or not self.policy.every_minutes:
            return False
        return time.monotonic() - self.last_save_time >= self.policy.every_minutes * 60

    # --- save -------------------------------------------------------------------
    def save(
        self,
        step: int,
        metrics: dict[str, float],
        *,
        write_files: Callable[[Path], None],
        trainer_state: dict[str, Any],
        format: str,
        reason: str | None = None,
    ) -> str:
        if self.storage is None:
            raise StorageError("this job has no checkpoint storage")
        name = layout.step_folder(step)
        started = time.monotonic()
        if self.rank == 0 and layout.inspect(self.storage, name) is not None:
            layout.remove(self.storage, name)  # a leftover of an earlier try
        barrier()
        entries: list[dict[str, Any]] | None = None
        error: str | None = None
        try:
            with files.staging_folder(self.storage, name, f"rank-{self.rank}") as staging:
                (staging / "trainer").mkdir(parents=True, exist_ok=True)
                torch.save(rng.capture(), staging / RNG_FILE.format(rank=self.rank))
                if self.rank == 0:
                    # Refused now if it would not load back without unpickling code.
                    check_loadable(trainer_state, what=TRAINER_STATE)
                    torch.save(trainer_state, staging / STATE_FILE)
                write_files(staging)
                entries = files.publish(self.storage, staging, name)
        except Exception as exc:
            error = f"rank {self.rank}: {self._explain(exc)}"
        gathered = gather((entries, error))
        errors = [err for _, err in gathered if err]
        if errors:
            raise StorageError(f"checkpoint step {step} was not saved: {'; '.join(errors)}")
        if self.rank == 0:
            published = [entry for rank_entries, _ in gathered for entry in rank_entries or []]
            manifest = layout.Manifest(
                step=step,
                metrics=numeric(metrics),
                strategy=self.strategy,
                format=format,
                world_size=self.world_size,
                files=[layout.FileEntry(**entry) for entry in published],
                job_id=self.job_id,
                attempt_id=self.attempt_id,
                reason=reason,
            )
            layout.write_manifest(self.storage, manifest)
            layout.apply_retention(self.storage, self.policy, step)
            size = manifest.size_bytes / 1e6
            self.log(
                f"trainplane: checkpoint step {step} saved ({len(published)} files, {size:.1f} MB, "
                f"{time.monotonic() - started:.1f}s)"
            )
        barrier()
        self.last_save_time = time.monotonic()
        return f"{self.storage.uri}/{name}"

    def _explain(self, exc: Exception) -> str:
        """What went wrong with a save, in words a user acts on. A full disk
        often surfaces as a library's own error (torch.save reports a short
        write as "unexpected pos"): it is named as such."""
        described = f"{type(exc).__name__}: {exc}"
        if isinstance(self.storage, LocalStorage):
            with contextlib.suppress(OSError):
                free = shutil.disk_usage(self.storage.root).free
                full = isinstance(exc, OSError) and exc.errno == errno.ENOSPC
                if full or free < LOW_SPACE_BYTES:
                    where = self.storage.root
                    return f"No space left on device at {where} ({free} bytes free; {described})"
        return described

    # --- resume -----------------------------------------------------------------
    def find_resume_point(self) -> tuple[str, str] | None:
        """(storage URI, folder name) to resume from, decided by rank 0 and
        shared with every rank. Rank 0 also clears unfinished saves."""
        choice: tuple[str, str] | None = None
        if self.rank == 0:
            choice = choose_resume_point(self.policy, self.storage, self.log)
        return broadcast(choice)

    def open_for_reading(self, storage_uri: str, name: str) -> tuple[Path, layout.Manifest]:
        """A local folder with every rank's files of the checkpoint."""
        storage = open_storage(storage_uri)
        found = layout.inspect(storage, name)
        if found is None or found.manifest is None:
            raise StorageError(f"{storage_uri}/{name} is no longer a complete checkpoint")
        if isinstance(storage, LocalStorage):
            return storage.local_folder(name), found.manifest
        local = Path(tempfile.mkdtemp(prefix=f"trainplane-resume-{name}-"))
        storage.get_tree(name, local)
        self._scratch = local
        return local, found.manifest

    def done_reading(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


def numeric(metrics: dict[str, Any]) -> dict[str, float]:
    return {
        key: float(value)
        for key, value in metrics.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


def read_rank_rng(folder: Path, rank: int) -> dict[str, Any] | None:
    """Loaded without unpickling code (runtime.safe_loading), as every file of
    a checkpoint is."""
    path = folder / RNG_FILE.format(rank=rank)
    return load_file(path, what=RNG_FILE.format(rank=rank)) if path.exists() else None


def read_trainer_state(folder: Path) -> dict[str, Any]:
    return load_file(folder / STATE_FILE, what=TRAINER_STATE)
