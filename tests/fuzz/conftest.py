"""One live server for the package: starting it is most of a module's time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fuzz.live_server import serve


@pytest.fixture(scope="package")
def server_url(postgres_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve(postgres_server, tmp_path_factory.mktemp("fuzz-home")) as url:
        yield url
