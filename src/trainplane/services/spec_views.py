"""A job's spec as a given caller may see it.

``entrypoint.env`` is configuration, not secret, but it is where people
have long put tokens: a viewer of the project sees its names with the values
hidden (DESIGN.md "Trust boundaries"); members and admins see the values,
having submitted them. ``entrypoint.secrets`` holds keys only and is shown
to all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainplane.jobs.environment import redacted_spec
from trainplane.services.access import Caller, Role


def sees_env_values(caller: Caller, project_id: str) -> bool:
    role = caller.role_in(project_id)
    return role is not None and role >= Role.MEMBER


def visible_spec(caller: Caller, project_id: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    if sees_env_values(caller, project_id):
        return dict(spec)
    return redacted_spec(spec)
