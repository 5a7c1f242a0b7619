"""Clusters say whether they autoscale and how long an attempt waits for its
workers to be placed.

Revision ID: a3f1c9d2e7b4
Revises: 3cc59e7ce438
Create Date: 2026-12-04 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = 'a3f1c9d2e7b4'
down_revision: str | None = '3cc59e7ce438'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('clusters', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('autoscaling', sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.add_column(sa.Column('start_timeout_seconds', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('clusters', schema=None) as batch_op:
        batch_op.drop_column('start_timeout_seconds')
        batch_op.drop_column('autoscaling')
