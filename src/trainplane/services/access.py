"""Who is calling, what they may see, and what their role lets them do.

Every service function takes a :class:`Caller` and scopes its queries with
:meth:`Caller.scope`, so routes and queries never change with auth. A caller
has a role per project (``viewer`` reads, ``member`` also submits and
cancels, ``admin`` also manages the project's tokens), or one role in every
project: the local user of an installation without tokens, and the bootstrap
token, are admins everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from sqlalchemy import ColumnElement, true

from trainplane.errors import ForbiddenError


class Role(IntEnum):
    VIEWER = 1
    MEMBER = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def named(cls, name: str) -> Role:
        return cls[name.upper()]


@dataclass(frozen=True)
class Caller:
    subject: str
    # Ids of the projects this caller may see; None means every project.
    project_ids: frozenset[str] | None = None
    roles: Mapping[str, Role] = field(default_factory=dict)  # project id -> role
    everywhere: Role | None = None  # the role in every project, if any
    token_id: str | None = None

    @classmethod
    def local_admin(cls) -> Caller:
        """The single local user of an installation without tokens."""
        return cls(subject="local", everywhere=Role.ADMIN)

    @classmethod
    def with_grants(
        cls, subject: str, grants: Mapping[str | None, Role], token_id: str | None = None
    ) -> Caller:
        """From a token's grants: project id -> role, None -> every project."""
        everywhere = grants.get(None)
        roles = {p: r for p, r in grants.items() if p is not None}
        visible = None if everywhere is not None else frozenset(roles)
        return cls(subject, visible, roles, everywhere, token_id)

    def role_in(self, project_id: str) -> Role | None:
        own = self.roles.get(project_id)
        if self.everywhere is None:
            return own
        return self.everywhere if own is None else max(own, self.everywhere)

    def may_use(self, project_id: str) -> bool:
        return self.role_in(project_id) is not None

    def scope(self, project_id_column: Any) -> ColumnElement[bool]:
        """A WHERE clause limiting ``project_id_column`` to this caller's projects."""
        if self.project_ids is None:
            return true()
        return project_id_column.in_(self.project_ids)

    def projects_with(self, role: Role) -> frozenset[str] | None:
        """The projects where this caller has at least ``role``; None: every project."""
        if self.everywhere is not None and self.everywhere >= role:
            return None
        return frozenset(p for p, r in self.roles.items() if r >= role)

    def require(self, project_id: str, role: Role, doing: str) -> None:
        """Refuse unless the caller has ``role`` in a project it can see."""
        have = self.role_in(project_id)
        if have is None or have < role:
            held = f"you are {have.label}" if have else "you have no role there"
            raise ForbiddenError(f"{doing} needs the {role.label} role in the project; {held}")

    def require_everywhere(self, role: Role, doing: str) -> None:
        """Refuse unless the caller has ``role`` in every project (installation-wide)."""
        if self.everywhere is None or self.everywhere < role:
            raise ForbiddenError(f"{doing} needs an installation-wide {role.label} token")
