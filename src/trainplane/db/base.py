"""Declarative base, constraint naming and column types shared by all models."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, ColumnElement, DateTime, Float, MetaData, bindparam
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import DeclarativeBase, Session
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import TypeDecorator

# Named constraints make migrations reproducible: without names, Postgres and
# SQLite invent different ones and later ALTERs cannot find them.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend.

    SQLite has no time zones and hands back naive values; this type stores UTC
    and always returns aware datetimes, so comparisons never mix the two.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTCDateTime column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# JSONB on Postgres (indexable, compact), plain JSON text elsewhere.
JSONDocument = JSON().with_variant(JSONB(), "postgresql")


class json_merge(FunctionElement[Any]):
    """``column`` with the keys of ``patch`` set over its own, in the database
    (a NULL column counts as ``{}``): one statement, no read-modify-write."""

    type = JSONDocument
    inherit_cache = True

    def __init__(self, column: ColumnElement[Any], patch: dict[str, Any]) -> None:
        super().__init__(column, bindparam(None, patch, type_=JSONDocument))


@compiles(json_merge, "postgresql")
def _json_merge_postgresql(element: json_merge, compiler: Any, **kw: Any) -> str:
    column, patch = (compiler.process(c, **kw) for c in element.clauses)
    # A JSON null (not SQL NULL) counts as {} too: null || {...} would be an array.
    return f"(coalesce(nullif({column}, 'null'::jsonb), '{{}}'::jsonb) || {patch})"


@compiles(json_merge, "sqlite")
def _json_merge_sqlite(element: json_merge, compiler: Any, **kw: Any) -> str:
    column, patch = (compiler.process(c, **kw) for c in element.clauses)
    return f"json_patch(coalesce({column}, '{{}}'), {patch})"


class epoch_seconds(FunctionElement[float]):
    """A UTCDateTime expression as unix seconds, computed by the database: sums
    of durations over many rows then need no datetime objects in Python."""

    type = Float()
    inherit_cache = True


@compiles(epoch_seconds, "postgresql")
def _epoch_seconds_postgresql(element: epoch_seconds, compiler: Any, **kw: Any) -> str:
    return f"extract(epoch from {compiler.process(element.clauses, **kw)})::float8"


@compiles(epoch_seconds, "sqlite")
def _epoch_seconds_sqlite(element: epoch_seconds, compiler: Any, **kw: Any) -> str:
    # Stored as naive UTC text; julianday 2440587.5 is the unix epoch.
    return f"((julianday({compiler.process(element.clauses, **kw)}) - 2440587.5) * 86400.0)"


def upsert_insert(session: Session, model: type[Base]) -> Any:
    """An INSERT of ``model`` that takes ``on_conflict_do_nothing`` and
    ``on_conflict_do_update``, in the dialect of the session's database."""
    dialect = session.get_bind().dialect.name
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(model)


def utcnow() -> datetime:
    return datetime.now(UTC)


def in_list(column: str, values: list[str]) -> str:
    """A CHECK constraint's text: ``column`` holds one of ``values``."""
    return f"{column} IN ({', '.join(repr(v) for v in values)})"
