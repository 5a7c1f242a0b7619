"""The example notebook, executed headless in a real Jupyter kernel against a
real server on the local Ray cluster: DDP, then FSDP2, of the same function."""

from __future__ import annotations

import json
from pathlib import Path

import nbclient
import nbformat
import pytest

import trainplane

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebook" / "train_mlp.ipynb"


def test_the_example_notebook_runs_end_to_end(
    cluster_server: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRAINPLANE_URL", cluster_server)
    monkeypatch.delenv("TRAINPLANE_TOKEN", raising=False)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()  # raises CellExecutionError, with the cell's traceback, if one fails

    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    text = json.dumps(outputs)
    assert "final loss: ddp" in text
    # The progress line was a display updated in place, and reached the end.
    assert "SUCCEEDED" in text
    # Both calls were ordinary jobs of the server, one per strategy.
    jobs = list(trainplane.Client(cluster_server).jobs(name="train_mlp"))
    assert sorted(j.strategy for j in jobs[:2]) == ["ddp", "fsdp"]
    assert all(j.status == "SUCCEEDED" for j in jobs[:2])
