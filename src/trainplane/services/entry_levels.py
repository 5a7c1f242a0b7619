"""Entry levels from the database (:mod:`trainplane.jobs.entry_levels` has
the rule): each unfinished job's level decided once, when the scheduler
first sees it, from its project's latest finished jobs of the same GPU
count, and kept on its row."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from trainplane.db.models import Job
from trainplane.jobs.entry_levels import entry_level, entry_note, reached_top
from trainplane.jobs.service_queues import ServiceRules
from trainplane.jobs.states import TERMINAL_STATUSES, JobStatus
from trainplane.services.run_time import run_seconds
from trainplane.services.status import SCHEDULER_ACTOR, record_note

# Jobs decided per call: a burst of submissions is taken over a few passes.
DECIDE_BATCH = 500

_FINISHED = [s.value for s in TERMINAL_STATUSES]
_UNFINISHED = [s.value for s in JobStatus if s not in TERMINAL_STATUSES]


def peer_outcomes(
    session: Session, project_id: str, gpus: int, now: datetime, rules: ServiceRules
) -> list[bool]:
    """Whether each of the project's latest finished jobs of ``gpus`` GPUs
    (at most ``rules.entry_peers``; the ones that never ran left out)
    reached the top level, the latest first."""
    rows = session.execute(
        select(Job.id)
        .where(
            Job.project_id == project_id,
            Job.gpus == gpus,
            Job.kind != "sweep",
            Job.status.in_(_FINISHED),
        )
        .order_by(Job.finished_at.desc().nulls_last(), Job.id.desc())
        .limit(rules.entry_peers)
    ).all()
    ran = run_seconds(session, [r.id for r in rows], now)
    return [reached_top(ran[r.id] * gpus, rules) for r in rows if r.id in ran]


def decide_entry_levels(session: Session, now: datetime, rules: ServiceRules) -> int:
    """Decides the entry level of the unfinished jobs that have none yet and
    keeps it on their rows; a job that enters at the top level gets a note in
    its history saying why. Returns how many it decided. Call inside a unit
    of work."""
    fresh = session.execute(
        select(Job.id, Job.project_id, Job.gpus, Job.status)
        .where(
            Job.entry_level.is_(None),
            Job.kind != "sweep",
            Job.status.in_(_UNFINISHED),
        )
        .order_by(Job.created_at, Job.id)
        .limit(DECIDE_BATCH)
    ).all()
    peers: dict[tuple[str, int], list[bool]] = {}
    for row in fresh:
        key = (row.project_id, row.gpus)
        if key not in peers:
            peers[key] = (
                peer_outcomes(session, row.project_id, row.gpus, now, rules)
                if rules.entry_top_fraction > 0
                else []
            )
        level = entry_level(peers[key], rules)
        changed = session.execute(
            update(Job).where(Job.id == row.id, Job.entry_level.is_(None)).values(entry_level=level)
        ).rowcount
        if changed and level:
            record_note(
                session,
                row.id,
                JobStatus(row.status),
                reason=entry_note(peers[key], row.gpus, rules),
                actor=SCHEDULER_ACTOR,
            )
    return len(fresh)
