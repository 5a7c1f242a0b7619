"""The idempotency key ``submit`` derives from a CI pipeline's variables, so a
retried or re-run pipeline step finds the job it started instead of starting a
second one.

The key names the CI run and step, never the attempt: GitHub Actions'
``GITHUB_RUN_ATTEMPT`` and GitLab's ``CI_JOB_ID`` change when a job is re-run or
retried, and a re-run should wait for the job the first try started. A hash of
the final spec (after ``--set``) is part of it, so two different submissions in
one step are two jobs. ``TRAINPLANE_CI_RUN_ID`` wins over the CI's own
variables: set it (for example to ``$GITHUB_RUN_ID-$GITHUB_RUN_ATTEMPT``) to
choose what counts as the same run, or to get keys on another CI system.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GENERIC_VARIABLE = "TRAINPLANE_CI_RUN_ID"


@dataclass(frozen=True)
class CiSystem:
    name: str
    marker: str  # set to "true" on this CI's runners
    variables: tuple[str, ...]  # together they name one step of one pipeline run
    run_variable: str  # shown in the key, so a person can tell runs apart


CI_SYSTEMS = (
    CiSystem(
        "github",
        "GITHUB_ACTIONS",
        ("GITHUB_REPOSITORY", "GITHUB_RUN_ID", "GITHUB_JOB"),
        "GITHUB_RUN_ID",
    ),
    CiSystem(
        "gitlab", "GITLAB_CI", ("CI_PROJECT_ID", "CI_PIPELINE_ID", "CI_JOB_NAME"), "CI_PIPELINE_ID"
    ),
)

# The server accepts visible ASCII, at most 255 characters.
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
RUN_PART_MAX = 64
DIGEST_CHARS = 32


@dataclass(frozen=True)
class DerivedKey:
    key: str
    source: str  # in words: where it came from


def spec_digest(document: dict[str, Any]) -> str:
    """A hash of the spec as sent: equal documents hash equal whatever their key order."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _key(system: str, run: str, parts: list[str], document: dict[str, Any]) -> str:
    digest = hashlib.sha256(
        json.dumps([system, *parts, spec_digest(document)]).encode()
    ).hexdigest()
    readable = _UNSAFE.sub("_", run)[:RUN_PART_MAX] or "run"
    return f"ci-{system}-{readable}-{digest[:DIGEST_CHARS]}"


def derive_key(env: Mapping[str, str], document: dict[str, Any]) -> DerivedKey | None:
    """The key for this CI step and spec, or None outside a CI we know."""
    generic = env.get(GENERIC_VARIABLE, "").strip()
    if generic:
        return DerivedKey(
            _key("run", generic, [generic], document), f"{GENERIC_VARIABLE} and the spec"
        )
    for system in CI_SYSTEMS:
        if env.get(system.marker, "").lower() != "true":
            continue
        values = [env.get(name, "") for name in system.variables]
        if not all(values):
            missing = [n for n, v in zip(system.variables, values, strict=True) if not v]
            raise MissingCiVariables(system, missing)
        return DerivedKey(
            _key(system.name, env[system.run_variable], values, document),
            f"{', '.join(system.variables)} and the spec",
        )
    return None


class MissingCiVariables(Exception):
    def __init__(self, system: CiSystem, missing: list[str]) -> None:
        self.system = system
        self.missing = missing
        super().__init__(
            f"{system.marker}=true but {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not set, so no idempotency key was "
            f"derived; pass --idempotency-key or set {GENERIC_VARIABLE}"
        )
