"""A dataset line over the read bound is a 422 from submit and plan naming
the field and the line, with nothing created and the line never read whole.
Real app, real databases, real files."""

from __future__ import annotations

import pytest

from tests.factories import count_rows
from trainplane.recipes.finetune.inputs import MAX_LINE_BYTES


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/jobs/plan"])
def test_a_line_over_the_bound_is_a_422_naming_the_field_and_line(
    api, session, finetune_files, server_dir, path
):
    train = server_dir / "train.jsonl"
    with open(train, "wb") as handle:
        handle.write(finetune_files.train.read_bytes())
        handle.write(b'{"prompt": "p", "completion": "' + b"c" * MAX_LINE_BYTES + b'"}\n')
    answer = api.post(path, json=finetune_files.spec(dataset={"train": str(train)}))
    assert answer.status_code == 422, answer.text[:500]
    (error,) = answer.json()["errors"]
    assert error["field"] == "dataset.train"
    assert error["message"].startswith("line 241 is longer than 8 MiB")
    assert count_rows(session) == (0, 0)
