"""The layer rules of DESIGN.md, checked on every import under ``src/trainplane``
(at the top of a module, inside a function, under ``TYPE_CHECKING``, absolute
or relative), so they cannot drift again. Pure: the sources are parsed, never
imported.

DESIGN.md: ``runtime/`` runs on the Ray cluster and talks to the control plane
only over HTTP; ``jobs/`` is pure code; the CLI is an HTTP client and imports no
server code. As a table (package: what it must not import, anywhere)::

    runtime   api services db scheduler cli sdk dashboard recipes       + server modules
    jobs      api services db scheduler backends runtime cli sdk dashboard  + server modules
    sdk       cli api services db scheduler dashboard                   + server modules
    cli       api services db scheduler dashboard    (server modules: launchers only)
    storage   api services db scheduler cli sdk dashboard               + server modules

Server modules are the control plane's own: the packages ``api services db
scheduler dashboard serve backends tracking observability`` and the top-level
``config`` (its settings), ``errors`` (what services raise), ``private_files``
and ``wakeup``. The CLI is also the command that starts the server (``up``,
``server``, ``scheduler``, ``db upgrade``, ``tokens create-admin``): its
launcher modules may import server modules, inside the function of that verb
only. Loading the CLI or the SDK loads no server module and none of the
server's libraries, so a client needs none of them installed.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "trainplane"

SERVER_MODULES = frozenset(
    {
        *("api", "services", "db", "scheduler", "dashboard", "serve", "backends", "tracking"),
        *("observability", "config", "errors", "private_files", "wakeup"),
    }
)
# package -> the parts of trainplane it must not import, anywhere in it: the
# rules of DESIGN.md's acceptance check, and no server module but in the CLI
# (whose launchers may, in the verb's function: see the test below).
DESIGN_RULES = {
    "runtime": {"api", "services", "db", "scheduler", "cli", "sdk", "dashboard", "recipes"},
    "jobs": {"api", "services", "db", "scheduler", "backends", "runtime", "cli", "sdk"}
    | {"dashboard"},
    "sdk": {"cli", "api", "services", "db", "scheduler", "dashboard"},
    "cli": {"api", "services", "db", "scheduler", "dashboard"},
    "storage": {"api", "services", "db", "scheduler", "cli", "sdk", "dashboard"},
}
FORBIDDEN = {
    package: rules | (SERVER_MODULES if package != "cli" else set())
    for package, rules in DESIGN_RULES.items()
}
# The CLI's verbs that run the control plane in this process.
LAUNCHERS = frozenset({"trainplane.cli.servers", "trainplane.cli.tokens"})
# Libraries only the control plane (or a training worker) needs.
SERVER_LIBRARIES = frozenset(
    {
        *("fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg", "jinja2"),
        *("pydantic_settings", "prometheus_client", "ray", "torch", "mlflow", "deepspeed"),
        *("transformers", "peft", "boto3"),
    }
)


@dataclass(frozen=True)
class Import:
    importer: str  # the dotted module that imports
    target: str  # the dotted module imported (for ``from m import name``: m.name if a module)
    deferred: bool  # inside a function or under TYPE_CHECKING: not run when the module loads
    line: int

    @property
    def part(self) -> str | None:
        """The package or top-level module of trainplane it names, if any."""
        parts = self.target.split(".")
        return parts[1] if parts[0] == "trainplane" and len(parts) > 1 else None

    def __str__(self) -> str:
        return f"{self.importer}:{self.line} -> {self.target}"


def module_of(path: Path, src: Path = SRC) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str, src: Path) -> bool:
    path = src.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Finder(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool, src: Path) -> None:
        self.module, self.src = module, src
        # What a relative import is relative to: the package the module is in.
        self.package = module.split(".") if is_package else module.split(".")[:-1]
        self.depth = 0
        self.found: list[Import] = []

    def _add(self, target: str, node: ast.stmt) -> None:
        self.found.append(Import(self.module, target, self.depth > 0, node.lineno))

    def _deferred(self, nodes: list[ast.stmt]) -> None:
        self.depth += 1
        for node in nodes:
            self.visit(node)
        self.depth -= 1

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._deferred([*node.decorator_list, *node.body])  # type: ignore[list-item]

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if not _type_checking(node.test):
            self.generic_visit(node)
            return
        self._deferred(node.body)
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package[: len(self.package) - (node.level - 1)]
            source = ".".join([*base, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        self._add(source, node)
        for alias in node.names:
            if _is_module(f"{source}.{alias.name}", self.src):
                self._add(f"{source}.{alias.name}", node)


def imports_in(path: Path, src: Path = SRC) -> list[Import]:
    finder = _Finder(module_of(path, src), path.name == "__init__.py", src)
    finder.visit(ast.parse(path.read_text(), str(path)))
    return finder.found


@functools.cache
def all_imports() -> dict[str, list[Import]]:
    return {module_of(path): imports_in(path) for path in sorted(PACKAGE.rglob("*.py"))}


def breaches(imports: dict[str, list[Import]]) -> list[str]:
    """Every import that breaks the table, named with its line."""
    found = []
    for module, listed in imports.items():
        parts = module.split(".")
        forbidden = FORBIDDEN.get(parts[1], set()) if len(parts) > 1 else set()
        found += [str(i) for i in listed if i.part in forbidden]
    return found


def loaded_with(roots: list[str], imports: dict[str, list[Import]]) -> set[str]:
    """The modules of trainplane (and the top names of other libraries) that
    loading ``roots`` loads: module-level imports, followed."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        if not module.startswith("trainplane"):
            continue
        parts = module.split(".")
        todo += [".".join(parts[:n]) for n in range(1, len(parts))]  # its packages load first
        todo += [i.target for i in imports.get(module, []) if not i.deferred]
    return seen


def test_every_package_imports_nothing_its_layer_forbids():
    assert breaches(all_imports()) == []


def test_loading_the_cli_or_the_sdk_loads_no_server_module_nor_server_library():
    imports = all_imports()
    roots = [m for m in imports if m.startswith(("trainplane.cli", "trainplane.sdk"))]
    loaded = loaded_with(roots, imports)
    server = sorted(
        m
        for m in loaded
        if (m.startswith("trainplane.") and m.split(".")[1] in SERVER_MODULES)
        or m.split(".")[0] in SERVER_LIBRARIES
    )
    assert server == []
    assert "trainplane.sdk.sessions" in loaded  # the walk follows the CLI into the SDK


def test_the_cli_imports_server_modules_only_in_the_verbs_that_start_the_server():
    outside = [
        str(i)
        for module, listed in all_imports().items()
        if module.startswith("trainplane.cli.")
        for i in listed
        if i.part in SERVER_MODULES and not (i.deferred and module in LAUNCHERS)
    ]
    assert outside == []


@pytest.mark.parametrize(
    ("where", "code", "expected"),
    [
        ("sdk/late.py", "def f():\n    from ..cli import main\n", "trainplane.cli"),
        ("sdk/__init__.py", "from .. import config\n", "trainplane.config"),
        ("runtime/typed.py", "if TYPE_CHECKING:\n    import trainplane.db.x\n", "trainplane.db"),
        ("jobs/relative.py", "from ..runtime.context import X\n", "trainplane.runtime"),
    ],
)
def test_relative_deferred_and_type_checking_imports_are_seen(tmp_path, where, code, expected):
    package = tmp_path / "trainplane"
    for folder in ("sdk", "runtime", "jobs", "cli", "db"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "config.py").write_text("")
    (package / where).write_text(code)
    found = imports_in(package / where, tmp_path)
    module = module_of(package / where, tmp_path)
    assert [i.target for i in found if i.target.startswith(expected)]
    assert breaches({module: found})


def test_a_module_level_import_is_followed_and_a_deferred_one_is_not():
    imports = {
        "trainplane.cli.verb": [
            Import("trainplane.cli.verb", "trainplane.sdk.sessions", False, 1),
            Import("trainplane.cli.verb", "trainplane.serve.embedded", True, 9),
        ],
        "trainplane.sdk.sessions": [Import("trainplane.sdk.sessions", "httpx", False, 1)],
    }
    loaded = loaded_with(["trainplane.cli.verb"], imports)
    assert {"trainplane.sdk", "trainplane.sdk.sessions", "httpx"} <= loaded
    assert "trainplane.serve.embedded" not in loaded
