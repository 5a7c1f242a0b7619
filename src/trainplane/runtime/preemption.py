"""How a preempted attempt stops: checkpoint, then leave with a known exit code.

The control plane answers rank 0's progress reports with a stop request when
a higher-priority job needs the GPUs. At the next ``ctx.report`` every rank
learns it together (rank 0's flag is broadcast), the checkpoint is saved
with ``reason: preempted`` in its manifest, and :class:`Preempted` unwinds
the train function on every rank. A rank process then exits with
:data:`EXIT_PREEMPTED`, and so does the driver: the scheduler requeues the job
and its next attempt resumes from that checkpoint. The manifest is how the
driver of a Ray Train gang, which sees only that its workers returned, tells
a preemption from a finished run.
"""

from __future__ import annotations

from trainplane.storage import checkpoints as layout
from trainplane.storage.backends import StorageError, open_storage

EXIT_PREEMPTED = 75  # EX_TEMPFAIL: try again later
CHECKPOINT_REASON = "preempted"


class Preempted(BaseException):
    """Raised by ``ctx.report`` on every rank once the preemption checkpoint is
    saved. A BaseException, like SystemExit, so that a train function's own
    ``except Exception`` does not swallow it."""


def checkpointed_for_preemption(checkpoint_root: str | None, attempt_id: str | None) -> bool:
    """Whether this attempt's latest checkpoint is one saved because it was preempted."""
    if not checkpoint_root or not attempt_id:
        return False
    try:
        latest = layout.latest_complete(open_storage(checkpoint_root))
    except StorageError:
        return False
    manifest = latest.manifest if latest is not None else None
    return (
        manifest is not None
        and manifest.attempt_id == attempt_id
        and manifest.reason == CHECKPOINT_REASON
    )
