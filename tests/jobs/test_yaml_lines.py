"""The line of a field in a spec file, and the words for a file that is not
YAML, an empty one, or one that is not a mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainplane.jobs.yaml_lines import line_of, path_parts
from trainplane.sdk.specfile import SpecFileError, load_spec_file

SPEC = """\
kind: train
name: lines
# a comment takes a line too
entrypoint:
  command:
    - python
    - train.py
  env: {WANDB_MODE: offline}
strategy: ddp
resources: {gpus: 2}
"""


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("kind", 1),
        ("entrypoint", 4),
        ("entrypoint.command", 5),
        ("entrypoint.command[1]", 7),
        ("entrypoint.command.0", 6),
        ("entrypoint.env.WANDB_MODE", 8),
        ("strategy", 9),
        ("strategy.type", 9),  # a field under a scalar: the scalar's line
        ("resources.gpus", 10),
        ("resources.gpus_per_node", 10),  # missing: the section it goes in
        ("checkpoint", None),  # missing at the top: no line to point at
        ("", None),
    ],
)
def test_each_path_has_the_line_of_its_key(path: str, line: int | None) -> None:
    assert line_of(SPEC, path) == line


def test_json_is_yaml_too_and_a_file_that_does_not_parse_has_no_lines() -> None:
    assert (
        line_of('{\n  "kind": "train",\n  "resources": {\n    "gpus": 0\n  }\n}', "resources.gpus")
        == 4
    )
    assert line_of("kind: [train\n", "kind") is None


def test_paths_split_into_fields_and_indexes() -> None:
    assert path_parts("a.b[1].c") == ["a", "b", 1, "c"]
    assert path_parts("entrypoint.args.learning rate") == ["entrypoint", "args", "learning rate"]


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("broken.yaml", "kind: train\nname: [x\n", "broken.yaml, line 3, column 1: not valid YAML"),
        ("broken.json", '{"kind": }', "broken.json, line 1, column 10: not valid JSON"),
        ("empty.yaml", "", "empty.yaml is empty: a spec needs at least `kind`, `name`"),
        ("comments.yaml", "# nothing yet\n", "comments.yaml is empty"),
        (
            "list.yaml",
            "- kind: train\n",
            "list.yaml must hold a mapping of spec fields, not a list",
        ),
    ],
)
def test_a_file_that_is_no_spec_is_named_with_its_line(
    tmp_path: Path, name: str, text: str, words: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SpecFileError) as caught:
        load_spec_file(path, [])
    assert str(caught.value).startswith(str(tmp_path / words)), str(caught.value)
    assert "<unicode string>" not in str(caught.value) and "NoneType" not in str(caught.value)
