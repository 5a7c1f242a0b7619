"""The CI examples and the documented exit codes stay true to the CLI: the
pipelines parse, every ``trainplane`` command in them uses options the real
command has, and the README tables list the codes the CLI exits with."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import typer.main
import yaml

from tests.cli.conftest import TRAINPLANE, clean_env
from trainplane.cli.common import EXIT_CODES
from trainplane.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / "examples" / "ci"


def scripts(document: object) -> list[str]:
    """Every shell script in a pipeline: GitHub ``run`` steps, GitLab ``script`` lists."""
    found: list[str] = []
    if isinstance(document, dict):
        for key, value in document.items():
            if key == "run" and isinstance(value, str):
                found.append(value)
            elif key in ("script", "before_script") and isinstance(value, list):
                found += [line for line in value if isinstance(line, str)]
            else:
                found += scripts(value)
    elif isinstance(document, list):
        for item in document:
            found += scripts(item)
    return found


def trainplane_commands(script: str) -> list[list[str]]:
    joined = re.sub(r"\\\n\s*", " ", script)  # shell line continuations
    commands = []
    for line in joined.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
        if words[:1] == ["trainplane"]:
            # Up to a redirection or the next command.
            end = next((i for i, w in enumerate(words) if set(w) <= set("();<>|&")), None)
            commands.append(words[1:end])
    return commands


def options_of(path: list[str]) -> set[str]:
    command = typer.main.get_command(app)
    for name in path:
        subcommands = getattr(command, "commands", {})
        assert name in subcommands, path
        command = subcommands[name]
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


@pytest.mark.parametrize("name", ["github-actions.yml", "gitlab-ci.yml"])
def test_the_pipelines_parse_and_use_real_options(name):
    document = yaml.safe_load((CI / name).read_text())
    commands = [c for script in scripts(document) for c in trainplane_commands(script)]
    assert commands, "no trainplane command found"
    for words in commands:
        verb = words[0]
        used = {word.split("=", 1)[0] for word in words if word.startswith("--")}
        assert used <= options_of([verb]), (name, used - options_of([verb]))
        assert {"--wait", "--fail-on", "--output"} <= used
        assert words[words.index("--output") + 1] == "json"
        spec = words[1]
        assert spec == "examples/finetune/job.yaml"
    text = (CI / name).read_text()
    assert "pip install trainplane" in text
    assert "TRAINPLANE_TOKEN" in text and "TRAINPLANE_URL" in text
    assert "finetune-result.json" in text.split("artifact" if "github" in name else "artifacts")[1]


def test_the_github_workflow_takes_the_secrets():
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text())
    steps = workflow["jobs"]["finetune"]["steps"]
    submit = next(step for step in steps if "trainplane submit" in step.get("run", ""))
    assert submit["env"] == {
        "TRAINPLANE_URL": "${{ secrets.TRAINPLANE_URL }}",
        "TRAINPLANE_TOKEN": "${{ secrets.TRAINPLANE_TOKEN }}",
    }
    upload = next(step for step in steps if step.get("uses", "").startswith("actions/upload"))
    assert upload["if"] == "always()"


def test_the_help_lists_every_exit_code():
    shown = subprocess.run(
        [str(TRAINPLANE), "submit", "--help"],
        env=clean_env(COLUMNS="200"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    for code, meaning in EXIT_CODES.items():
        assert re.search(rf"\b{code}  {re.escape(meaning)}", shown.stdout), (code, shown.stdout)


@pytest.mark.parametrize("document", ["README.md", "examples/ci/README.md"])
def test_the_readme_tables_list_every_exit_code(document):
    text = (ROOT / document).read_text()
    rows = re.findall(r"^\| (\d+) \|", text, re.M)
    assert [int(code) for code in rows] == list(EXIT_CODES), document
