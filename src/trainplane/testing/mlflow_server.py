"""A real ``mlflow server`` process on 127.0.0.1 (tests only); stopping it and
starting it again keeps its port, which is how tests play an MLflow outage."""

from __future__ import annotations

import sys
from pathlib import Path

from trainplane.testing.server import ServiceProcess


class MlflowServer(ServiceProcess):
    name = "mlflow server"
    ready_path = "/health"

    def __init__(
        self,
        backend_store_uri: str,
        artifacts_destination: str,
        *,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        # One worker and no job runner: a test machine has two cores.
        super().__init__(
            {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **(env or {})}, log_path=log_path
        )
        self.backend_store_uri = backend_store_uri
        self.artifacts_destination = artifacts_destination

    def command(self) -> list[str]:
        return [
            str(Path(sys.executable).with_name("mlflow")),
            "server",
            "--backend-store-uri",
            self.backend_store_uri,
            "--artifacts-destination",
            self.artifacts_destination,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
        ]
