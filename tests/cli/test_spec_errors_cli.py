"""``plan`` and ``submit`` of a wrong spec, against a real server: exit 2,
each error once, with the file and the line of its field."""

from __future__ import annotations

import json

import pytest

SPEC = """\
kind: train
name: wrong
project: default
entrypoint: {command: [python]}
strategy: ddp
resource: {gpus: 1}
"""


@pytest.mark.postgres_only
def test_plan_and_submit_name_the_file_and_line_of_each_error_once(cli, tmp_path):
    path = tmp_path / "strategy.yaml"
    path.write_text(SPEC)
    strategy = f"{path}, line 5: `strategy` is a mapping like `{{type: ddp}}`, not `ddp`"
    typo = f"{path}, line 6: `resource` is an unknown field: did you mean `resources`?"
    for verb in ("plan", "submit"):
        result = cli(verb, str(path))
        assert result.exit_code == 2, result.output
        assert result.stderr.count(strategy) == 1, result.stderr
        assert result.stderr.count(typo) == 1, result.stderr
        assert result.stderr.count("`strategy`") == 1  # nothing printed twice
        assert "valid dictionary" not in result.stderr
    assert json.loads(cli("jobs", "list", "--json").stdout) == []
    # A missing field has no line of its own: the file is named all the same.
    path.write_text("kind: train\nname: no-code\n")
    missing = cli("plan", str(path))
    assert missing.exit_code == 2
    assert f"{path}: `entrypoint` is missing" in missing.stderr
    assert all(form in missing.stderr for form in ("`function`", "`script`", "`command`"))
    path.write_text("")
    empty = cli("submit", str(path))
    assert empty.exit_code == 2 and f"{path} is empty: a spec needs" in empty.stderr
