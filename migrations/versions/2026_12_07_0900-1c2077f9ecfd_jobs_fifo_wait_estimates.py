"""Jobs keep the first-come-first-served wait estimated when they were first
queued (the wait bound of the attained-service order is the longest of them
lately).

Revision ID: 1c2077f9ecfd
Revises: e66fdfbac128
Create Date: 2026-12-07 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '1c2077f9ecfd'
down_revision: str | None = 'e66fdfbac128'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('fifo_wait_seconds', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs') as batch_op:
        batch_op.drop_column('fifo_wait_seconds')
