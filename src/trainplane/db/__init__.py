"""The job store: SQLAlchemy models, engine setup and Alembic migrations.

PostgreSQL in production, a SQLite file for the embedded default. Only
``trainplane.services`` and the scheduler use this package; routes never do.
"""
