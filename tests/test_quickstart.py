"""``./scripts/quickstart``, the README's first command, as a newcomer runs it:
it starts ``trainplane up``, trains the MLP example (fewer steps here), and
shows the loss, the checkpoints, the MLflow run and the registered model, then
how to open the job in the dashboard; it stops what it started."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from trainplane.net import free_port

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_trains_and_registers_a_model(tmp_path):
    home = tmp_path / "home"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINPLANE_", "MLFLOW_"))}
    env.update(
        TRAINPLANE_HOME=str(home), TRAINPLANE_PORT=str(port), TRAINPLANE_QUICKSTART_NO_SETUP="1"
    )
    shorter = ["--set", "entrypoint.args.steps=40", "--set", "checkpoint.every_steps=20"]
    done = subprocess.run(
        [str(ROOT / "scripts" / "quickstart"), *shorter],
        cwd=tmp_path,  # it finds the checkout itself
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-4000:]
    job = done.stdout.splitlines()[0].strip()
    # The loss as it trains (the job's log), then by step from its metrics.
    assert re.search(r"\[rank 0\] trainplane: step 1/40 loss=\d", said), said[-4000:]
    assert re.search(r"^step +40 +loss \d+\.\d{4}$", done.stdout, re.M), done.stdout
    # keep_last: 2 of the checkpoints at steps 20 and 40.
    rows = re.findall(r"^(\d+) .* 2x ddp ", done.stdout, re.M)
    assert rows == ["40", "20"], done.stdout
    assert "registered model quickstart-mlp version 1 alias candidate" in said
    assert re.search(rf"^quickstart-mlp +1 +candidate +READY +{job}", done.stdout, re.M)
    assert f"http://127.0.0.1:{port}/jobs/{job}" in done.stdout
    assert f"trainplane jobs get {job}" in done.stdout
    record = json.loads((home / "runs" / job / "job.json").read_text())
    assert record["status"] == "SUCCEEDED"
    assert record["registered_model"]["name"] == "quickstart-mlp"
    assert record["tracking"]["run_id"]
    # What it started is gone: nothing answers on its port any more.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
