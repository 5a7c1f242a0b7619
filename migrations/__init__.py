"""Alembic migrations of the job store (installed as ``trainplane.migrations``)."""
