"""Every verb's ``--help``: an "Examples:" block, a type column without
typer's noise (``<bool>``, ``<list[str]>``, ``<str>``), and each option spelled
the same way in every verb of a group (``--project``/``-p`` everywhere)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from trainplane.cli.help_text import EXAMPLES
from trainplane.cli.main import app

NOISE = re.compile(r"<(bool|str|int|float|list\[[^\]]*\]|[a-z]+ range|path|Path)>|no-no-")


def _verbs(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, sub in sorted((getattr(group, "commands", None) or {}).items()):
        if getattr(sub, "commands", None):
            yield from _verbs(sub, (*path, name))
        else:
            yield (*path, name), sub


ROOT = typer.main.get_command(app)
VERBS = list(_verbs(ROOT))


def test_every_verb_has_examples_and_every_example_names_a_verb():
    words = {" ".join(path) for path, _ in VERBS}
    assert words - set(EXAMPLES) == set()
    assert set(EXAMPLES) - words == set()  # no examples of a verb that is gone
    for verb, lines in EXAMPLES.items():
        assert all(line.split("trainplane ", 1)[-1].startswith(verb) for line in lines), verb


@pytest.mark.parametrize("path", [p for p, _ in VERBS], ids=[" ".join(p) for p, _ in VERBS])
def test_help_has_examples_and_no_metavar_noise(path):
    result = CliRunner().invoke(app, [*path, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "Examples:" in result.output
    assert f"trainplane {' '.join(path)}" in result.output.split("Examples:")[1]
    assert not NOISE.search(result.output), NOISE.search(result.output)


def test_root_help_names_the_global_options():
    result = CliRunner().invoke(app, ["--help"], terminal_width=200)
    assert result.exit_code == 0
    for option in ("--url", "--token", "--output", "--version"):
        assert option in result.output
    assert not NOISE.search(result.output)


def _groups(group: Any) -> Iterator[Any]:
    yield group
    for sub in (getattr(group, "commands", None) or {}).values():
        if getattr(sub, "commands", None):
            yield from _groups(sub)


def test_an_option_is_spelled_the_same_in_every_verb_of_a_group():
    different = []
    for group in _groups(ROOT):
        spellings: dict[str, set[tuple[str, ...]]] = defaultdict(set)
        for sub in group.commands.values():
            for param in sub.params:
                if param.param_type_name == "option" and not param.hidden:
                    spellings[param.name].add(tuple(sorted(param.opts + param.secondary_opts)))
        different += [(group.name, name, s) for name, s in spellings.items() if len(s) > 1]
    assert different == []


def test_every_verb_that_prints_takes_output():
    quiet = {"up", "server", "scheduler", "db upgrade", "login", "init", "jobs logs"}
    quiet |= {"clusters apply", "clusters remove", "tokens revoke"}
    quiet |= {"secrets delete"}
    missing = [
        " ".join(path)
        for path, verb in VERBS
        if " ".join(path) not in quiet and "output" not in {p.name for p in verb.params}
    ]
    assert missing == []
