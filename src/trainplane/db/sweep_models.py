"""The sweep side of a trial: which sweep it belongs to, the parameters the
search gave it, and the objective values the pruner judges it by.

A trial is an ordinary job (``jobs.parent_id`` names its sweep); this row
holds only what the sweep needs beside it, so that the search can be rebuilt
from the database alone after a crash.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, ForeignKey, Integer, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from trainplane.db.base import Base, JSONDocument, UTCDateTime, utcnow


class SweepTrial(Base):
    __tablename__ = "sweep_trials"
    __table_args__ = (UniqueConstraint("sweep_id", "number"),)

    # The trial's own job.
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    sweep_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    # 1-based, in the order the search proposed the trials.
    number: Mapped[int] = mapped_column(Integer)
    # {--set path: value}, as the search proposed them.
    parameters: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    # The steps at which the pruner judges the trial (list[int]).
    decision_steps: Mapped[list[int]] = mapped_column(JSONDocument)
    # The objective at each decision step reached: {str(step): value}.
    values: Mapped[dict[str, float]] = mapped_column(JSONDocument)
    last_value: Mapped[float | None] = mapped_column(Float)
    best_value: Mapped[float | None] = mapped_column(Float)
    last_step: Mapped[int | None] = mapped_column(Integer)
    # What the search engine asked to keep about the trial; opaque here.
    search_state: Mapped[dict[str, Any]] = mapped_column(JSONDocument, default=dict)
    # Set when the pruner asked the trial to stop: the reason its job ends with.
    pruned_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
