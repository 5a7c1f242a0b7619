"""Sweeps: a job of kind sweep, its trials as jobs whose parent it is, and the
sweep side of each trial (parameters, objective values at decision steps).

Revision ID: e66fdfbac128
Revises: 8b290178a661
Create Date: 2026-12-06 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = 'e66fdfbac128'
down_revision: str | None = '8b290178a661'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')


def upgrade() -> None:
    op.create_table('sweep_trials',
    sa.Column('job_id', sa.String(length=26), nullable=False),
    sa.Column('sweep_id', sa.String(length=26), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('parameters', JSON, nullable=False),
    sa.Column('decision_steps', JSON, nullable=False),
    sa.Column('values', JSON, nullable=False),
    sa.Column('last_value', sa.Float(), nullable=True),
    sa.Column('best_value', sa.Float(), nullable=True),
    sa.Column('last_step', sa.Integer(), nullable=True),
    sa.Column('search_state', JSON, nullable=False),
    sa.Column('pruned_reason', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_sweep_trials_job_id_jobs'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['sweep_id'], ['jobs.id'], name=op.f('fk_sweep_trials_sweep_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id', name=op.f('pk_sweep_trials')),
    sa.UniqueConstraint('sweep_id', 'number', name=op.f('uq_sweep_trials_sweep_id_number'))
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('parent_id', sa.String(length=26), nullable=True))
        batch_op.create_index('ix_jobs_parent_id_created_at_id', ['parent_id', 'created_at', 'id'], unique=False)
        batch_op.create_foreign_key(batch_op.f('fk_jobs_parent_id_jobs'), 'jobs', ['parent_id'], ['id'], ondelete='CASCADE')
        batch_op.drop_constraint(batch_op.f('ck_jobs_kind'), type_='check')
        batch_op.create_check_constraint(
            batch_op.f('ck_jobs_kind'), "kind IN ('train', 'finetune', 'sweep')"
        )


def downgrade() -> None:
    op.drop_table('sweep_trials')
    # Sweeps cannot be told apart from jobs without this revision: they go;
    # their trials stay, as the plain jobs they are.
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_jobs_parent_id_jobs'), type_='foreignkey')
        batch_op.drop_index('ix_jobs_parent_id_created_at_id')
        batch_op.drop_column('parent_id')
    op.execute("DELETE FROM jobs WHERE kind = 'sweep'")
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('ck_jobs_kind'), type_='check')
        batch_op.create_check_constraint(batch_op.f('ck_jobs_kind'), "kind IN ('train', 'finetune')")
