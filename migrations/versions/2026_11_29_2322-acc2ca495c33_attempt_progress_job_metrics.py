"""Attempt progress (step, heartbeats), job metrics, server secrets.

Revision ID: acc2ca495c33
Revises: ada4cdc24c7e
Create Date: 2026-11-29 23:22:50.203462
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = 'acc2ca495c33'
down_revision: str | None = 'ada4cdc24c7e'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_DOCUMENT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table('server_secrets',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('value', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_server_secrets'))
    )
    op.create_table('job_metrics',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.String(length=26), nullable=False),
    sa.Column('attempt_id', sa.String(length=26), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('recorded_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('values', JSON_DOCUMENT, nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_job_metrics_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_job_metrics'))
    )
    with op.batch_alter_table('job_metrics', schema=None) as batch_op:
        batch_op.create_index('ix_job_metrics_job_id_id', ['job_id', 'id'], unique=False)

    with op.batch_alter_table('job_attempts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('progress_step', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('total_steps', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('last_heartbeat_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('last_progress_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('job_attempts', schema=None) as batch_op:
        batch_op.drop_column('last_progress_at')
        batch_op.drop_column('last_heartbeat_at')
        batch_op.drop_column('total_steps')
        batch_op.drop_column('progress_step')

    with op.batch_alter_table('job_metrics', schema=None) as batch_op:
        batch_op.drop_index('ix_job_metrics_job_id_id')

    op.drop_table('job_metrics')
    op.drop_table('server_secrets')
