"""Server-side process wiring."""

from __future__ import annotations

import pytest

from trainplane.config import Settings
from trainplane.serve.processes import ServeError, prepare_database, running_scheduler


def test_one_scheduler_per_sqlite_database(tmp_path):
    settings = Settings(
        home=tmp_path, database_url=f"sqlite:///{tmp_path}/tp.db", auto_migrate=True
    )
    prepare_database(settings)
    with running_scheduler(settings):
        second = running_scheduler(settings)
        with pytest.raises(ServeError, match="another scheduler"):
            second.__enter__()
    # Released on exit: a new one may start.
    with running_scheduler(settings):
        pass
