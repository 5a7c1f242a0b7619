"""MLflow tracking state of jobs (job_tracking), latest metrics of attempts.

Jobs alive at upgrade time get their tracking row here, so their runs are
created like those of jobs placed afterwards.

Revision ID: 27273ba8a130
Revises: acc2ca495c33
Create Date: 2026-12-01 08:18:26.118370
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '27273ba8a130'
down_revision: str | None = 'acc2ca495c33'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_DOCUMENT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
LIVE_JOB_STATUSES = ("STARTING", "RUNNING", "RESTARTING", "CANCELLING")


def upgrade() -> None:
    op.create_table('job_tracking',
    sa.Column('job_id', sa.String(length=26), nullable=False),
    sa.Column('experiment_id', sa.String(length=64), nullable=True),
    sa.Column('run_id', sa.String(length=64), nullable=True),
    sa.Column('run_url', sa.Text(), nullable=True),
    sa.Column('synced_metric_id', sa.BigInteger(), nullable=False),
    sa.Column('synced_attempts', sa.String(length=255), nullable=False),
    sa.Column('model_name', sa.String(length=256), nullable=True),
    sa.Column('model_version', sa.String(length=32), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('error_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('failures', sa.Integer(), nullable=False),
    sa.Column('lease_token', sa.String(length=32), nullable=True),
    sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_job_tracking_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id', name=op.f('pk_job_tracking'))
    )
    with op.batch_alter_table('job_tracking', schema=None) as batch_op:
        batch_op.create_index('ix_job_tracking_finished_at_lease_expires_at', ['finished_at', 'lease_expires_at'], unique=False)

    with op.batch_alter_table('job_attempts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('latest_metrics', JSON_DOCUMENT, nullable=True))

    jobs = sa.table("jobs", sa.column("id"), sa.column("status"))
    tracking = sa.table(
        "job_tracking",
        sa.column("job_id"),
        sa.column("synced_metric_id"),
        sa.column("synced_attempts"),
        sa.column("failures"),
        sa.column("created_at"),
    )
    op.execute(
        tracking.insert().from_select(
            ["job_id", "synced_metric_id", "synced_attempts", "failures", "created_at"],
            sa.select(
                jobs.c.id,
                sa.literal(0),
                sa.literal(""),
                sa.literal(0),
                sa.func.current_timestamp(),
            ).where(jobs.c.status.in_(LIVE_JOB_STATUSES)),
        )
    )



def downgrade() -> None:
    with op.batch_alter_table('job_attempts', schema=None) as batch_op:
        batch_op.drop_column('latest_metrics')

    with op.batch_alter_table('job_tracking', schema=None) as batch_op:
        batch_op.drop_index('ix_job_tracking_finished_at_lease_expires_at')

    op.drop_table('job_tracking')
