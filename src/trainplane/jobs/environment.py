"""What a spec may put in its job's environment: ``entrypoint.env`` (plain
configuration) and ``entrypoint.secrets`` (variables whose values are project
secrets, put there at launch). Pure code, shared by the spec's models.

Both name environment variables under the same rules: a valid name, and not
one trainplane sets for every worker (a user value would silently break the
run). A variable is configuration or a secret, never both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field, StringConstraints
from pydantic_core import PydanticCustomError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A job may turn the rank pool (runtime.rank_pool) off for itself, to "0" only:
# how long a warm parent waits on a node is the operator's to say.
RANK_POOL_ENV = "TRAINPLANE_RANK_POOL_IDLE_SECONDS"
# trainplane's variables a job may set itself: the runtime's optional outputs,
# and the rank pool's opt-out.
USER_SETTABLE_ENV = frozenset(
    {"TRAINPLANE_METRICS_FILE", "TRAINPLANE_START_EVENTS_FILE", RANK_POOL_ENV}
)
RESERVED_ENV = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)
# A project secret's key: what PUT /v1/projects/{name}/secrets/{key} names.
SECRET_KEY_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,127}$"
SecretKey = Annotated[
    str,
    StringConstraints(pattern=SECRET_KEY_PATTERN),
    Field(description="Lowercase letters, digits, '.', '_' and '-'; 1-128 characters."),
]
# What a viewer sees in place of an entrypoint.env value.
REDACTED = "<hidden>"


def check_env_name(key: Any) -> str:
    """``key`` as a variable a job may set; raises naming the rule it breaks."""
    if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
        raise PydanticCustomError(
            "env_name", "'{key}' is not a valid environment variable name", {"key": key}
        )
    reserved = key.startswith("TRAINPLANE_") and key not in USER_SETTABLE_ENV
    if key in RESERVED_ENV or reserved:
        raise PydanticCustomError(
            "env_reserved",
            "'{key}' is set by trainplane and cannot be overridden",
            {"key": key},
        )
    return key


def env_values(value: Any) -> Any:
    """``entrypoint.env`` with checked names and string values."""
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        check_env_name(key)
        # YAML turns `THREADS: 4` into an int; environment values are strings.
        out[key] = (
            str(item).lower()
            if isinstance(item, bool)
            else (str(item) if isinstance(item, int | float) else item)
        )
    if RANK_POOL_ENV in out and out[RANK_POOL_ENV] != "0":
        raise PydanticCustomError(
            "env_rank_pool",
            "'{key}' may only be '0' (this job's ranks start without the rank pool); "
            "how long the pool waits is the server's rank_pool_idle_seconds",
            {"key": RANK_POOL_ENV},
        )
    return out


def secret_refs(value: Any) -> Any:
    """``entrypoint.secrets`` with checked variable names (the keys' own
    pattern is the field type's)."""
    if isinstance(value, dict):
        for key in value:
            check_env_name(key)
            if key == RANK_POOL_ENV:
                raise PydanticCustomError(
                    "env_reserved",
                    "'{key}' is set in entrypoint.env, not from a secret",
                    {"key": key},
                )
    return value


def check_not_in_env(secrets: Mapping[str, str], env: Mapping[str, str] | None) -> None:
    """A variable comes from a secret or from env, not from both: which one
    would win is not something a spec should leave to chance."""
    both = sorted(set(secrets) & set(env or {}))
    if both:
        raise PydanticCustomError(
            "secret_and_env",
            "{names} is set by both entrypoint.env and entrypoint.secrets; keep one",
            {"names": ", ".join(both)},
        )


def redacted_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` (a stored spec document) with each ``entrypoint.env`` value
    replaced by :data:`REDACTED`: the names stay, so a reader knows what is
    set, but not to what."""
    document = dict(spec)
    entrypoint = document.get("entrypoint")
    if isinstance(entrypoint, Mapping) and entrypoint.get("env"):
        document["entrypoint"] = {
            **entrypoint,
            "env": dict.fromkeys(entrypoint["env"], REDACTED),
        }
    return document
