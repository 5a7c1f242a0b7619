"""docs/cli.md has a section for every verb the ``trainplane`` command has, so
a verb added to the CLI is documented with it."""

from __future__ import annotations

from pathlib import Path

import typer

from trainplane.cli.main import app

ROOT = Path(__file__).resolve().parents[1]


def _verbs(command, prefix=()):
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from _verbs(sub, (*prefix, name))
    else:
        yield " ".join(prefix)


def test_every_verb_has_a_section_in_docs_cli_md():
    text = (ROOT / "docs" / "cli.md").read_text()
    verbs = list(_verbs(typer.main.get_command(app)))
    assert len(verbs) > 20
    missing = [verb for verb in verbs if f"### `trainplane {verb}" not in text]
    assert not missing, f"docs/cli.md has no section for: {missing}"
