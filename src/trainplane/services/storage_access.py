"""Checkpoint storage, checked at submit and plan time: a job whose bucket
does not exist, or that the credentials may not write to, is refused before
it queues, instead of failing its first checkpoint hours into a run.

The check writes and deletes one small object with the control plane's
credentials; give the Ray workers the same ones. A success is remembered for
a minute per location, so a burst of submissions costs one round trip. Local
paths are not checked: the control plane may not mount what the workers do.
"""

from __future__ import annotations

import threading
import time

from trainplane.errors import InvalidInputError, UpstreamError
from trainplane.jobs.spec import FinetuneSpec, TrainSpec
from trainplane.storage.backends import S3Storage, StorageError, s3_client

REMEMBER_SECONDS = 60.0
PROBE_ATTEMPTS = 2
PROBE_TIMEOUT_SECONDS = 5.0

_checked: dict[str, float] = {}
_lock = threading.Lock()


def check_checkpoint_storage(spec: TrainSpec | FinetuneSpec, project_root: str) -> None:
    """422 naming ``checkpoint.storage`` when the spec's storage is unusable;
    502 when the project's root is (an operator's problem, not the
    submitter's). Only called once the spec's storage is known to lie under
    ``project_root``, so the probe never writes outside the project's own root."""
    if spec.checkpoint.storage is not None:
        try:
            check_writable(spec.checkpoint.storage)
        except StorageError as exc:
            raise InvalidInputError("checkpoint.storage", str(exc)) from None
    else:
        try:
            check_writable(project_root)
        except StorageError as exc:
            raise UpstreamError(f"the project's checkpoint storage is not usable: {exc}") from None


def check_writable(uri: str) -> None:
    if not uri.startswith("s3://"):
        return
    with _lock:
        checked = _checked.get(uri)
    if checked is not None and time.monotonic() - checked < REMEMBER_SECONDS:
        return
    client = s3_client(max_attempts=PROBE_ATTEMPTS, timeout_seconds=PROBE_TIMEOUT_SECONDS)
    S3Storage(uri, client=client).check_writable()
    with _lock:
        _checked[uri] = time.monotonic()
