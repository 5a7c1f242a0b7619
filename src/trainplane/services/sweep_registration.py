"""Whether a sweep that has finished searching still waits for its best
trial's model to be registered.

A sweep with ``register_model`` ends SUCCEEDED only once the tracking loop has
registered the best trial's model (``scheduler.tracking``), so whoever waited
for the sweep finds the model there. It does not wait for what cannot come:
without tracking, after the sweep's tracking ended, or after the registration
failed a few times in a row; the sweep then says why its model is missing.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from trainplane.db.models import JobTracking
from trainplane.jobs.sweep_spec import SweepSpec

# Failed tracking passes (with backoff between them) before a sweep stops
# waiting for its model and ends without it.
MAX_REGISTRATION_FAILURES = 3


def registration_pending(
    session: Session, sweep_id: str, spec: SweepSpec, *, tracking: bool
) -> tuple[bool, str | None]:
    """(still waiting, why the model is not registered when no longer waiting)."""
    if spec.register_model is None:
        return False, None
    if not tracking:
        return False, "experiment tracking is off on this server"
    row = session.get(JobTracking, sweep_id, populate_existing=True)
    if row is None:
        return False, "the sweep has no tracking"
    if row.model_version is not None:
        return False, None
    if row.finished_at is not None:
        return False, row.error or "its tracking ended without registering it"
    if row.error is not None and row.failures >= MAX_REGISTRATION_FAILURES:
        return False, row.error
    return True, None
