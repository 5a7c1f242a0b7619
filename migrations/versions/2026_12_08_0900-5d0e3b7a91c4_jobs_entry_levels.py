"""Jobs keep the attained-service level they entered at, decided when the
scheduler first saw them from their project's finished jobs of the same GPU
count (the top level for jobs whose peers mostly reached it).

Revision ID: 5d0e3b7a91c4
Revises: 1c2077f9ecfd
Create Date: 2026-12-08 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '5d0e3b7a91c4'
down_revision: str | None = '1c2077f9ecfd'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('entry_level', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs') as batch_op:
        batch_op.drop_column('entry_level')
