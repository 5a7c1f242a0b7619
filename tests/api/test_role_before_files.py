"""The caller's role in a spec's project is checked before any file the spec
names is opened. Shown with named pipes as the fine-tune's inputs: opening
one for reading blocks until someone writes to it, so an answer at all
proves nothing was opened. Whether the project exists makes no difference to
the answer. On both databases."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from trainplane.api.app import create_app

ROOT = "root-token-for-role-before-files"


@pytest.fixture
def outsider(settings):
    """The API with projects alpha and beta, and a member of alpha only."""
    secured = settings.model_copy(update={"bootstrap_token": SecretStr(ROOT)})
    with TestClient(create_app(secured)) as client:
        root = {"Authorization": f"Bearer {ROOT}"}
        for name in ("alpha", "beta"):
            client.post("/v1/projects", json={"name": name}, headers=root)
        body = {"name": "alpha-member", "project": "alpha", "role": "member"}
        token = client.post("/v1/tokens", json=body, headers=root).json()["token"]
        yield client, {"Authorization": f"Bearer {token}"}


@pytest.fixture
def pipes(server_dir: Path) -> dict[str, str]:
    """A model folder whose config.json, and datasets that, are named pipes,
    among the server's own files (so only the role could refuse them)."""
    model = server_dir / "model"
    model.mkdir()
    os.mkfifo(model / "config.json")
    for name in ("train.jsonl", "eval.jsonl"):
        os.mkfifo(server_dir / name)
    return {
        "base_model": str(model),
        "train": str(server_dir / "train.jsonl"),
        "eval": str(server_dir / "eval.jsonl"),
    }


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/jobs/plan"])
@pytest.mark.parametrize("project", ["beta", "no-such-project"])
def test_no_role_in_the_project_is_refused_before_any_file_is_opened(
    outsider, pipes, path, project
):
    client, member_of_alpha = outsider
    spec = {
        "kind": "finetune",
        "name": "peek",
        "project": project,
        "base_model": pipes["base_model"],
        "dataset": {"train": pipes["train"], "eval": pipes["eval"]},
    }
    answer = client.post(path, json=spec, headers=member_of_alpha)
    assert answer.status_code == 403, answer.text
    doing = "submitting" if path == "/v1/jobs" else "planning"
    assert answer.json()["detail"] == (
        f"{doing} a job in project '{project}' needs the member role there "
        "(or the project does not exist)"
    )
