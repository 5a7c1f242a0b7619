"""How a preempted (or pruned) attempt stops: checkpoint, then leave with a known exit code.

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
# A sweep's trial the pruner stopped saves and leaves the same way; only the
# manifest and the log say why (the scheduler ends it, not requeues it).
PRUNED_REASON = "pruned"
STOP_REASONS = frozenset({CHECKPOINT_REASON, PRUNED_REASON})


def checkpoint_reason(asked: str | None) -> str:
    """The manifest's reason of a save made because the control plane asked
    for a stop with reason ``asked``."""
    return PRUNED_REASON if asked == PRUNED_REASON else CHECKPOINT_REASON


class Preempted(BaseException):
    """Raised by ``ctx.report`` on every rank once the stop's checkpoint is
    saved (a preemption, or a prune: ``reason``). A BaseException, like
    SystemExit, so that a train function's own ``except Exception`` does not
    swallow it."""

    def __init__(self, message: str, reason: str = CHECKPOINT_REASON) -> None:
        super().__init__(message)
        self.reason = reason


def checkpointed_to_stop(checkpoint_root: str | None, attempt_id: str | None) -> str | None:
    """The reason (one of STOP_REASONS) when this attempt's latest checkpoint
    is one it saved because it was asked to stop; None otherwise."""
    if not checkpoint_root or not attempt_id:
        return None
    try:
        latest = layout.latest_complete(open_storage(checkpoint_root))
    except StorageError:
        return None
    manifest = latest.manifest if latest is not None else None
    if manifest is None or manifest.attempt_id != attempt_id:
        return None
    return manifest.reason if manifest.reason in STOP_REASONS else None


def checkpointed_for_preemption(checkpoint_root: str | None, attempt_id: str | None) -> bool:
    """Whether this attempt's latest checkpoint is one saved because it was
    asked to stop (preempted or pruned)."""
    return checkpointed_to_stop(checkpoint_root, attempt_id) is not None


def stopped_message(reason: str) -> str:
    """The driver's line when the attempt stopped as asked."""
    if reason == PRUNED_REASON:
        return "trainplane: pruned by its sweep; the trial stops here"
    return "trainplane: stopped for preemption; the next attempt resumes from here"
