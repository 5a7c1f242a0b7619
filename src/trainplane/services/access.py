"""Who is calling, and which projects they may see.

Every service function takes a :class:`Caller` and scopes its queries with
:meth:`Caller.scope`, so token auth and roles plug in by building Callers
differently, without touching routes or queries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, true


@dataclass(frozen=True)
class Caller:
    subject: str
    # Ids of the projects this caller may use; None means every project.
    project_ids: frozenset[str] | None = None

    @classmethod
    def local_admin(cls) -> Caller:
        """The single local user of an installation without tokens."""
        return cls(subject="local")

    def may_use(self, project_id: str) -> bool:
        return self.project_ids is None or project_id in self.project_ids

    def scope(self, project_id_column: Any) -> ColumnElement[bool]:
        """A WHERE clause limiting ``project_id_column`` to this caller's projects."""
        if self.project_ids is None:
            return true()
        return project_id_column.in_(self.project_ids)
