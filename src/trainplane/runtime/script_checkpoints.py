"""How the ranks of a script publish what they saved as one checkpoint.

A script's ranks write their files into a folder of their node (one per node,
shared by its ranks, as a torchrun ``output_dir`` is), then every rank calls
``trainplane.script.checkpoint(step)``. No process group is needed; the ranks
meet through files:

1. every rank writes the marker ``<sync dir>/step-N/rank-<RANK>``;
2. the node's local rank 0 waits for its node's ranks, uploads the folder's
   files to ``<storage>/step-N/`` and writes the node's record
   ``<storage>/.publishing/step-N/node-<GROUP_RANK>.json`` (every file's path,
   size and sha256, or the error), then the marker ``published`` (or
   ``failed`` with the reason) in the sync dir;
3. the node's other ranks wait for that marker;
4. global rank 0 waits for every node's record, merges them (one file sent by
   two nodes must be the same file), writes the manifest last, removes the
   records and applies the retention policy.

Every wait has a timeout and says who did not arrive. A node's record names
the attempt and the round (the how-many-th save of that step in this process),
so a record left by an earlier attempt is never merged.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainplane.jobs.spec import Checkpoint
from trainplane.storage import checkpoints as layout
from trainplane.storage import files
from trainplane.storage.backends import Storage, StorageError, join

DEFAULT_TIMEOUT = 600.0
PUBLISHING = ".publishing"  # in the storage: the node records of saves under way
FORMAT = "files"  # the manifest's format: the files as the script wrote them
PUBLISHED = "published"
FAILED = "failed"


@dataclass(frozen=True)
class Placement:
    """Where this process sits in the gang (torchrun's variables)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    node: int = 0
    nodes: int = 1

    @classmethod
    def from_env(cls, environ: Mapping[str, str], nodes_variable: str) -> Placement:
        def number(name: str, default: int) -> int:
            return int(environ.get(name) or default)

        world_size = number("WORLD_SIZE", 1)
        return cls(
            rank=number("RANK", 0),
            local_rank=number("LOCAL_RANK", 0),
            world_size=world_size,
            local_world_size=number("LOCAL_WORLD_SIZE", world_size),
            node=number("GROUP_RANK", 0),
            nodes=number(nodes_variable, 1),
        )


class PublishTimeout(StorageError):
    """Someone the protocol waits for did not arrive in time; the message says who."""


@dataclass
class Publisher:
    """One per process: publishes that process's part of each checkpoint."""

    storage: Storage
    sync_dir: Path
    placement: Placement
    policy: Checkpoint
    strategy: str
    job_id: str | None = None
    attempt_id: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    log: Callable[[str], None] = print
    rounds: dict[int, int] = field(default_factory=dict)

    def publish(
        self,
        step: int,
        folder: Path,
        *,
        metrics: Mapping[str, float],
        reason: str | None = None,
        empty_after: bool = False,
    ) -> str | None:
        """This rank's part of checkpoint ``step``, whose files are in
        ``folder``. Returns the checkpoint's URI on global rank 0, once it is
        complete; None on the other ranks, once their node's files are up."""
        started = time.monotonic()
        name = layout.step_folder(step)
        self.rounds[step] = round_ = self.rounds.get(step, 0) + 1
        sync = self.sync_dir / (name if round_ == 1 else f"{name}.{round_}")
        sync.mkdir(parents=True, exist_ok=True)
        me = self.placement
        _write_marker(sync / f"rank-{me.rank}", str(me.local_rank))
        if me.local_rank == 0:
            self._publish_node(step, round_, sync, folder, empty_after=empty_after)
        else:
            self._wait_for_node(step, sync)
        if me.rank != 0:
            return None
        return self._complete(step, round_, metrics, reason, started)

    # --- a node's part ------------------------------------------------------------
    def _publish_node(
        self, step: int, round_: int, sync: Path, folder: Path, *, empty_after: bool
    ) -> None:
        name = layout.step_folder(step)
        record: dict[str, Any] = {
            "attempt_id": self.attempt_id,
            "round": round_,
            "node": self.placement.node,
        }
        try:
            if self.placement.rank == 0:
                self._drop_stale_manifest(name)
            self._wait_for_local_ranks(step, sync)
            entries, skipped = (
                files.publish_folder(self.storage, folder, name, move=empty_after)
                if folder.is_dir()
                else ([], [])
            )
            if skipped:
                self.log(
                    f"trainplane: checkpoint step {step}: not published (symlinks or special "
                    f"files): {', '.join(skipped[:10])}"
                )
            record["files"] = entries
            if empty_after:
                _empty(folder)
        except Exception as exc:
            record["error"] = f"node {self.placement.node}: {type(exc).__name__}: {exc}"
            _write_marker(sync / FAILED, record["error"])
            # So that global rank 0 fails now, not at its timeout; the storage
            # may be what failed, and then it waits.
            with contextlib.suppress(Exception):
                self._write_record(name, record)
            raise
        self._write_record(name, record)
        _write_marker(sync / PUBLISHED, "")

    def _wait_for_local_ranks(self, step: int, sync: Path) -> None:
        expected = set(range(self.placement.local_world_size))

        def arrived() -> set[int]:
            return {int(_read_marker(marker) or -1) for marker in sync.glob("rank-*")}

        _wait(
            lambda: expected <= arrived(),
            self.timeout,
            lambda: (
                f"checkpoint step {step}: local ranks "
                f"{_listed(expected - arrived())} of node {self.placement.node} did not call "
                f"checkpoint({step}) within {self.timeout:g} s"
            ),
        )

    def _wait_for_node(self, step: int, sync: Path) -> None:
        def outcome() -> bool:
            failed = _read_marker(sync / FAILED)
            if failed is not None:
                raise StorageError(f"checkpoint step {step} was not saved: {failed}")
            return (sync / PUBLISHED).exists()

        _wait(
            outcome,
            self.timeout,
            lambda: (
                f"checkpoint step {step}: local rank 0 of node {self.placement.node} did not "
                f"publish the node's files within {self.timeout:g} s"
            ),
        )

    def _write_record(self, name: str, record: dict[str, Any]) -> None:
        path = f"{PUBLISHING}/{name}/node-{self.placement.node}.json"
        self.storage.write_bytes(path, json.dumps(record).encode())

    # --- the whole checkpoint (global rank 0) ------------------------------------
    def _drop_stale_manifest(self, name: str) -> None:
        """A manifest of this step left by an earlier run would vouch for the
        files being replaced now: it goes first."""
        if self.storage.read_bytes(f"{name}/{layout.MANIFEST}") is not None:
            self.log(f"trainplane: replacing the earlier checkpoint {name}")
            self.storage.delete(f"{name}/{layout.MANIFEST}")

    def _complete(
        self,
        step: int,
        round_: int,
        metrics: Mapping[str, float],
        reason: str | None,
        started: float,
    ) -> str:
        name = layout.step_folder(step)
        records = self._node_records(step, round_)
        errors = [record["error"] for record in records.values() if record.get("error")]
        if errors:
            raise StorageError(f"checkpoint step {step} was not saved: {'; '.join(errors)}")
        manifest = layout.Manifest(
            step=step,
            metrics=dict(metrics),
            strategy=self.strategy,
            format=FORMAT,
            world_size=self.placement.world_size,
            files=[layout.FileEntry(**entry) for entry in merge(records)],
            job_id=self.job_id,
            attempt_id=self.attempt_id,
            reason=reason,
        )
        layout.write_manifest(self.storage, manifest)
        found = layout.inspect(self.storage, name)
        if found is None or not found.complete:
            problem = found.problem if found is not None else "nothing was uploaded"
            raise StorageError(f"checkpoint step {step} is not complete: {problem}")
        self.storage.delete_tree(f"{PUBLISHING}/{name}")
        layout.apply_retention(self.storage, self.policy, step)
        self.log(
            f"trainplane: checkpoint step {step} saved ({len(manifest.files)} files, "
            f"{manifest.size_bytes / 1e6:.1f} MB, {time.monotonic() - started:.1f} s)"
        )
        return join(self.storage.uri, name)

    def _node_records(self, step: int, round_: int) -> dict[int, dict[str, Any]]:
        prefix = f"{PUBLISHING}/{layout.step_folder(step)}"
        records: dict[int, dict[str, Any]] = {}

        def all_in() -> bool:
            for path in self.storage.sizes(prefix):
                node = _record_node(path)
                if node is None or node in records:
                    continue
                record = _parse(self.storage.read_bytes(f"{prefix}/{path}"))
                ours = record.get("attempt_id") == self.attempt_id and record.get("round") == round_
                if ours:
                    records[node] = record
            return len(records) >= self.placement.nodes

        _wait(
            all_in,
            self.timeout,
            lambda: (
                f"checkpoint step {step}: nodes "
                f"{_listed(set(range(self.placement.nodes)) - set(records))} did not publish "
                f"their files within {self.timeout:g} s"
            ),
            longest_pause=1.0,
        )
        return records


def merge(records: Mapping[int, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every node's file entries as one list. A path sent by two nodes is one
    entry when the files are the same (same sha256); different files under
    one path are an error naming the path and the nodes."""
    merged: dict[str, dict[str, Any]] = {}
    sender: dict[str, int] = {}
    for node in sorted(records):
        for entry in records[node].get("files", []):
            path = entry["path"]
            if path in merged and merged[path]["sha256"] != entry["sha256"]:
                raise StorageError(
                    f"nodes {sender[path]} and {node} saved different files as {path}: "
                    "give each rank's files names of their own"
                )
            merged.setdefault(path, dict(entry))
            sender.setdefault(path, node)
    return [merged[path] for path in sorted(merged)]


def _wait(
    done: Callable[[], bool],
    timeout: float,
    missing: Callable[[], str],
    *,
    longest_pause: float = 0.25,
) -> None:
    """Until ``done()``; PublishTimeout with ``missing()`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = 0.01
    while not done():
        if time.monotonic() > deadline:
            raise PublishTimeout(missing())
        time.sleep(pause)
        pause = min(pause * 2, longest_pause)


def _write_marker(path: Path, text: str) -> None:
    """Whole or not at all: readers on the node never see half a marker."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    os.replace(partial, path)


def _read_marker(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def _empty(folder: Path) -> None:
    """What is left in the folder goes; the folder stays for the next save."""
    for child in folder.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def _record_node(path: str) -> int | None:
    stem = path.removesuffix(".json")
    if "/" in path or not stem.startswith("node-") or not stem[5:].isdigit():
        return None
    return int(stem[5:])


def _parse(raw: bytes | None) -> dict[str, Any]:
    try:
        parsed = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _listed(numbers: set[int]) -> str:
    return ", ".join(str(number) for number in sorted(numbers)) or "(none)"
