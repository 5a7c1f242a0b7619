"""The fine-tune input checks read on a tenant's behalf, on the control
plane, so every read is bounded (recipes.finetune.inputs): a line over
MAX_LINE_BYTES is a problem naming it and is never held whole; a check reads
at most MAX_CHECKED_LINES lines and MAX_CHECKED_BYTES; config.json at most
MAX_CONFIG_BYTES. Real files, a real S3 API (moto), real memory accounting."""

from __future__ import annotations

import io
import json
import random
import shutil
import tracemalloc
from pathlib import Path

import pytest

from trainplane.recipes.finetune import inputs
from trainplane.storage.backends import s3_client

pytestmark = pytest.mark.ray_free

MiB = 1024 * 1024


def write_long_line_file(path: Path, long_bytes: int) -> Path:
    """Line 1 good, line 2 a JSON string of ``long_bytes``, line 3 not JSON,
    line 4 good: written in pieces, never held whole here either."""
    with open(path, "wb") as handle:
        handle.write(b'{"text": "first"}\n{"text": "')
        piece = b"x" * MiB
        for _ in range(long_bytes // MiB):
            handle.write(piece)
        handle.write(b'"}\nnot json\n{"text": "last"}\n')
    return path


def test_lines_come_out_whole_across_chunk_boundaries(monkeypatch) -> None:
    monkeypatch.setattr(inputs, "READ_CHUNK_BYTES", 7)
    monkeypatch.setattr(inputs, "MAX_LINE_BYTES", 20)
    generator = random.Random(0)
    lines = [b"y" * generator.choice([0, 1, 6, 7, 8, 13, 20, 21, 40]) for _ in range(300)]
    data = b"\n".join(lines) + generator.choice([b"", b"\n"])
    expected = [line if len(line) <= 20 else None for line in data.split(b"\n")]
    if data.endswith(b"\n"):
        expected.pop()
    progress = inputs.ReadProgress()
    assert list(inputs.bounded_lines(io.BytesIO(data).read, progress)) == expected
    assert progress.complete and progress.bytes_read == len(data)


def test_a_line_over_the_bound_is_named_and_the_next_lines_are_still_checked(
    tmp_path: Path,
) -> None:
    path = write_long_line_file(tmp_path / "d.jsonl", inputs.MAX_LINE_BYTES + MiB)
    with pytest.raises(inputs.InputProblems) as raised:
        inputs.check_dataset("dataset.train", str(path))
    problems = [(p.field, p.message) for p in raised.value.problems]
    assert problems[0][0] == "dataset.train"
    assert problems[0][1].startswith("line 2 is longer than 8 MiB")
    assert problems[1][1].startswith("line 3 is not valid JSON")
    assert len(problems) == 2
    # The runtime reads the same way: the job fails naming the line, too.
    with pytest.raises(inputs.InputProblem, match="line 2 is longer than 8 MiB"):
        inputs.read_dataset("dataset.train", str(path))


def test_checking_a_huge_line_holds_a_bounded_amount_of_memory(tmp_path: Path) -> None:
    path = write_long_line_file(tmp_path / "huge.jsonl", 96 * MiB)
    tracemalloc.start()
    try:
        with pytest.raises(inputs.InputProblems):
            inputs.check_dataset("dataset.train", str(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # One line's bound plus a read chunk or two, not the 96 MiB line.
    assert peak < inputs.MAX_LINE_BYTES + 4 * inputs.READ_CHUNK_BYTES, peak / MiB


@pytest.mark.parametrize("bound", ["lines", "bytes"])
def test_a_check_stops_at_its_bound_and_says_it_checked_part(
    tmp_path: Path, monkeypatch, bound: str
) -> None:
    rows = [json.dumps({"text": f"row {i}"}) for i in range(1000)]
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(rows) + "\n")
    if bound == "lines":
        monkeypatch.setattr(inputs, "MAX_CHECKED_LINES", 100)
    else:
        monkeypatch.setattr(inputs, "READ_CHUNK_BYTES", 64)
        monkeypatch.setattr(inputs, "MAX_CHECKED_BYTES", 1000)
    summary = inputs.check_dataset("dataset.train", str(path))
    assert not summary.complete and 0 < summary.rows < 1000
    assert "in the part checked" in summary.describe()
    # The read stopped mid-line: no false problem for the cut line, and the
    # whole file is still read by the runtime.
    assert len(inputs.read_dataset("dataset.train", str(path))) == 1000


def test_an_oversized_config_is_refused_before_it_is_read(
    finetune_files, tmp_path: Path, monkeypatch
) -> None:
    folder = tmp_path / "model"
    shutil.copytree(finetune_files.model, folder)
    config = (folder / "config.json").read_bytes()
    monkeypatch.setattr(inputs, "MAX_CONFIG_BYTES", len(config) - 1)
    with pytest.raises(inputs.InputProblem, match=r"config\.json is over"):
        inputs.check_base_model("base_model", str(folder))


def test_a_long_line_on_s3_is_bounded_too(s3_bucket: str, monkeypatch) -> None:
    monkeypatch.setattr(inputs, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(inputs, "READ_CHUNK_BYTES", 256)
    body = b'{"text": "a"}\n{"text": "' + b"z" * 5000 + b'"}\n{"text": "b"}\n'
    s3_client().put_object(Bucket=s3_bucket, Key="d.jsonl", Body=body)
    with pytest.raises(inputs.InputProblems) as raised:
        inputs.check_dataset("dataset.eval", f"s3://{s3_bucket}/d.jsonl")
    (problem,) = raised.value.problems
    assert (problem.field, problem.message.split(" is")[0]) == ("dataset.eval", "line 2")
