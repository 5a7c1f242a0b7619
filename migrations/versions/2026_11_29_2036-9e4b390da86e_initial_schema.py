"""Initial schema: projects, jobs, job attempts, job events, clusters.

Revision ID: 9e4b390da86e
Revises:
Create Date: 2026-11-29 20:36:23.649132
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '9e4b390da86e'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DEFAULT_PROJECT_ID = "0" * 26
JSON_DOCUMENT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table('clusters',
    sa.Column('id', sa.String(length=26), nullable=False),
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('address', sa.String(length=1024), nullable=False),
    sa.Column('accelerator', sa.String(length=32), nullable=False),
    sa.Column('gpus', sa.Integer(), nullable=False),
    sa.Column('gpus_per_node', sa.Integer(), nullable=False),
    sa.Column('gpu_memory_gb', sa.Float(), nullable=True),
    sa.Column('price_per_gpu_hour', sa.Float(), nullable=False),
    sa.Column('labels', JSON_DOCUMENT, nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint('gpus >= 0', name=op.f('ck_clusters_gpus_nonnegative')),
    sa.CheckConstraint('gpus_per_node >= 1', name=op.f('ck_clusters_gpus_per_node_positive')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_clusters')),
    sa.UniqueConstraint('name', name=op.f('uq_clusters_name'))
    )
    projects = op.create_table('projects',
    sa.Column('id', sa.String(length=26), nullable=False),
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_projects')),
    sa.UniqueConstraint('name', name=op.f('uq_projects_name'))
    )
    # Every installation starts with a project to submit to.
    op.bulk_insert(projects, [{
        "id": DEFAULT_PROJECT_ID, "name": "default", "description": "Created at installation.",
        "created_at": datetime.now(UTC),
    }])
    op.create_table('jobs',
    sa.Column('id', sa.String(length=26), nullable=False),
    sa.Column('project_id', sa.String(length=26), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('priority', sa.SmallInteger(), nullable=False),
    sa.Column('gpus', sa.Integer(), nullable=False),
    sa.Column('strategy', sa.String(length=16), nullable=False),
    sa.Column('spec', JSON_DOCUMENT, nullable=False),
    sa.Column('spec_hash', sa.String(length=64), nullable=False),
    sa.Column('submitted_by', sa.String(length=255), nullable=False),
    sa.Column('idempotency_key', sa.String(length=255), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("kind IN ('train', 'finetune')", name=op.f('ck_jobs_kind')),
    sa.CheckConstraint("status IN ('QUEUED', 'STARTING', 'RUNNING', 'RESTARTING', 'CANCELLING', 'SUCCEEDED', 'FAILED', 'CANCELLED')", name=op.f('ck_jobs_status')),
    sa.CheckConstraint('gpus >= 1', name=op.f('ck_jobs_gpus_positive')),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], name=op.f('fk_jobs_project_id_projects'), ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_jobs')),
    sa.UniqueConstraint('submitted_by', 'idempotency_key', name=op.f('uq_jobs_submitted_by_idempotency_key'))
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index('ix_jobs_created_at_id', ['created_at', 'id'], unique=False)
        batch_op.create_index('ix_jobs_project_id_created_at_id', ['project_id', 'created_at', 'id'], unique=False)
        batch_op.create_index('ix_jobs_project_id_name_created_at_id', ['project_id', 'name', 'created_at', 'id'], unique=False)
        batch_op.create_index('ix_jobs_status_created_at_id', ['status', 'created_at', 'id'], unique=False)
        batch_op.create_index('ix_jobs_status_priority_created_at', ['status', 'priority', 'created_at'], unique=False)

    op.create_table('job_attempts',
    sa.Column('id', sa.String(length=26), nullable=False),
    sa.Column('job_id', sa.String(length=26), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('cluster_id', sa.String(length=26), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("status IN ('PENDING', 'SUBMITTED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'STOPPED', 'LOST')", name=op.f('ck_job_attempts_status')),
    sa.ForeignKeyConstraint(['cluster_id'], ['clusters.id'], name=op.f('fk_job_attempts_cluster_id_clusters'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_job_attempts_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_job_attempts')),
    sa.UniqueConstraint('job_id', 'number', name=op.f('uq_job_attempts_job_id_number'))
    )
    with op.batch_alter_table('job_attempts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_job_attempts_cluster_id'), ['cluster_id'], unique=False)

    op.create_table('job_events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.String(length=26), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('from_status', sa.String(length=16), nullable=True),
    sa.Column('to_status', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('actor', sa.String(length=255), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_job_events_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_job_events'))
    )
    with op.batch_alter_table('job_events', schema=None) as batch_op:
        batch_op.create_index('ix_job_events_job_id_id', ['job_id', 'id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('job_events', schema=None) as batch_op:
        batch_op.drop_index('ix_job_events_job_id_id')

    op.drop_table('job_events')
    with op.batch_alter_table('job_attempts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_job_attempts_cluster_id'))

    op.drop_table('job_attempts')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_status_priority_created_at')
        batch_op.drop_index('ix_jobs_status_created_at_id')
        batch_op.drop_index('ix_jobs_project_id_name_created_at_id')
        batch_op.drop_index('ix_jobs_project_id_created_at_id')
        batch_op.drop_index('ix_jobs_created_at_id')

    op.drop_table('jobs')
    op.drop_table('projects')
    op.drop_table('clusters')
