"""Scheduler state: attempt leases and progress, placement columns on jobs,
cluster health.

Revision ID: ada4cdc24c7e
Revises: 9e4b390da86e
Create Date: 2026-11-29 21:23:29.157596
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = 'ada4cdc24c7e'
down_revision: str | None = '9e4b390da86e'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('clusters', schema=None) as batch_op:
        batch_op.add_column(sa.Column('status', sa.String(length=16), server_default='UNKNOWN', nullable=False))
        batch_op.add_column(sa.Column('status_message', sa.Text(), server_default='', nullable=False))
        batch_op.add_column(sa.Column('checked_at', sa.DateTime(timezone=True), nullable=True))

    with op.batch_alter_table('job_attempts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('submitted_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('last_seen_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('stop_reason', sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column('log_tail', sa.Text(), server_default='', nullable=False))
        batch_op.add_column(sa.Column('lease_token', sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index('ix_job_attempts_status_lease_expires_at', ['status', 'lease_expires_at'], unique=False)

    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('gpus_per_node', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('gpu_type', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('max_runtime_seconds', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=True))
        # Queue order is priority DESC, created_at, id: one index walk serves it.
        batch_op.drop_index('ix_jobs_status_priority_created_at')
        batch_op.create_index('ix_jobs_queue_order', ['status', sa.literal_column('priority').desc(), 'created_at', 'id'], unique=False)

    # Jobs still waiting or running get their placement columns from their spec.
    jobs = sa.table(
        "jobs",
        sa.column("id", sa.String), sa.column("status", sa.String), sa.column("spec", sa.JSON),
        sa.column("gpus_per_node", sa.Integer), sa.column("gpu_type", sa.String),
        sa.column("max_runtime_seconds", sa.Integer),
    )
    connection = op.get_bind()
    live = connection.execute(
        sa.select(jobs.c.id, jobs.c.spec).where(
            jobs.c.status.notin_(["SUCCEEDED", "FAILED", "CANCELLED"])
        )
    ).all()
    for job_id, spec in live:
        resources = spec.get("resources") or {}
        connection.execute(
            jobs.update().where(jobs.c.id == job_id).values(
                gpus_per_node=resources.get("gpus_per_node"),
                gpu_type=resources.get("gpu_type"),
                max_runtime_seconds=_seconds(spec.get("max_runtime")),
            )
        )


def _seconds(duration: str | None) -> int | None:
    """Seconds in a normalised duration such as 1d2h3m4s (as stored specs hold)."""
    if not duration:
        return None
    total, number = 0, ""
    for char in duration:
        if char.isdigit():
            number += char
        else:
            total += int(number) * {"d": 86400, "h": 3600, "m": 60, "s": 1}[char]
            number = ""
    return total



def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_queue_order')
        batch_op.create_index('ix_jobs_status_priority_created_at', ['status', 'priority', 'created_at'], unique=False)
        batch_op.drop_column('next_attempt_at')
        batch_op.drop_column('max_runtime_seconds')
        batch_op.drop_column('gpu_type')
        batch_op.drop_column('gpus_per_node')

    with op.batch_alter_table('job_attempts', schema=None) as batch_op:
        batch_op.drop_index('ix_job_attempts_status_lease_expires_at')
        batch_op.drop_column('lease_expires_at')
        batch_op.drop_column('lease_token')
        batch_op.drop_column('log_tail')
        batch_op.drop_column('stop_reason')
        batch_op.drop_column('last_seen_at')
        batch_op.drop_column('submitted_at')

    with op.batch_alter_table('clusters', schema=None) as batch_op:
        batch_op.drop_column('checked_at')
        batch_op.drop_column('status_message')
        batch_op.drop_column('status')

