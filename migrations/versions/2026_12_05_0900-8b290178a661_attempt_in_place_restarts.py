"""Attempts count the restarts Ray Train made within them, which spend the
job's restart budget like failed attempts do.

Revision ID: 8b290178a661
Revises: a3f1c9d2e7b4
Create Date: 2026-12-05 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '8b290178a661'
down_revision: str | None = 'a3f1c9d2e7b4'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('job_attempts', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('in_place_restarts', sa.Integer(), server_default='0', nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table('job_attempts', schema=None) as batch_op:
        batch_op.drop_column('in_place_restarts')
