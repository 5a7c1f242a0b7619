"""Fault injection against real processes on this machine: ``trainplane
server`` on PostgreSQL, scheduling on local Ray clusters, some of two nodes.
Each test kills or breaks one part and checks what users see: nothing
acknowledged lost, no attempt launched twice, every job ending right."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.factories import small_spec
from tests.runtime.test_training import MLP

# The scheduler tests' fast loops, as a fixture here too.
from tests.scheduler.conftest import FAST, fast_settings  # noqa: F401

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


def server_env(db_url: str, home: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``trainplane server`` on ``db_url`` with the
    scheduler's fast test loops. The example MLP's folder is a server path,
    as an operator lists a shared code folder: jobs may name it."""
    return {
        "TRAINPLANE_DATABASE_URL": db_url,
        "TRAINPLANE_HOME": str(home),
        "TRAINPLANE_SERVER_PATHS": str(MLP),
        **{f"TRAINPLANE_{key.upper()}": str(value) for key, value in FAST.items()},
        **extra,
    }


@pytest.fixture
def chaos_env(db_url: str, tmp_path: Path) -> dict[str, str]:
    return server_env(db_url, tmp_path / "home")


def appender(index: int, ran: Path) -> dict:
    """A job that appends its id to ``ran``, then runs a while: a job run
    twice shows twice."""
    code = (
        f"import os, time; open({str(ran)!r}, 'a').write(os.environ['TRAINPLANE_JOB_ID'] + '\\n');"
        " time.sleep(2)"
    )
    return small_spec(f"chaos-{index}", gpus=1, entrypoint={"command": ["python", "-c", code]})
