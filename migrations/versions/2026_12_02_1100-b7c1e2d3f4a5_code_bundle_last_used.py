"""Code bundles remember when they were last used, for the retention sweep.

Revision ID: b7c1e2d3f4a5
Revises: 4d0b8d081454
Create Date: 2026-12-02 11:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = 'b7c1e2d3f4a5'
down_revision: str | None = '4d0b8d081454'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('code_bundles', schema=None) as batch_op:
        batch_op.add_column(sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True))
    # An existing bundle was last used, as far as anyone knows, when it was uploaded.
    op.execute("UPDATE code_bundles SET last_used_at = created_at")
    with op.batch_alter_table('code_bundles', schema=None) as batch_op:
        batch_op.alter_column('last_used_at', existing_type=sa.DateTime(timezone=True), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table('code_bundles', schema=None) as batch_op:
        batch_op.drop_column('last_used_at')
