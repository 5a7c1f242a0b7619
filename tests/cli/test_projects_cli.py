"""``trainplane projects update --storage`` and ``projects list``: an
installation admin sets and resets a project's storage root; a project's own
admin cannot. A real server, the installed command in its own process."""

from __future__ import annotations

from tests.cli.conftest import BOOTSTRAP, run_cli


def test_an_admin_sets_and_resets_a_projects_storage_root(secured, tmp_path):
    admin = {"TRAINPLANE_TOKEN": BOOTSTRAP, "TRAINPLANE_HOME": str(tmp_path / "client")}
    root = tmp_path / "team-storage"
    set_ = run_cli(secured.url, "projects", "update", "default", "--storage", str(root), env=admin)
    assert set_.returncode == 0, set_.stderr
    assert set_.stdout.splitlines()[-1] == f"default: storage root {root}"
    listed = run_cli(secured.url, "projects", "list", env=admin)
    ((name, _description, shown),) = [line.split("\t") for line in listed.stdout.splitlines()]
    assert (name, shown) == ("default", str(root))

    default = run_cli(secured.url, "projects", "update", "default", "--default-storage", env=admin)
    assert default.returncode == 0, default.stderr
    home = tmp_path / "home"
    assert default.stdout.splitlines()[-1].endswith(f"{home}/checkpoints/default")

    both = ("--storage", str(root), "--default-storage")
    refused = run_cli(secured.url, "projects", "update", "default", *both, env=admin)
    assert refused.returncode == 2 and "not both" in refused.stderr
    inside = run_cli(
        secured.url, "projects", "update", "default", "--storage", str(home), env=admin
    )
    assert inside.returncode == 2 and "storage" in inside.stderr
    assert "TRAINPLANE_HOME" in inside.stderr


def test_a_projects_own_admin_cannot_move_its_storage(secured, tmp_path):
    admin = {"TRAINPLANE_TOKEN": BOOTSTRAP, "TRAINPLANE_HOME": str(tmp_path / "client")}
    created = run_cli(
        secured.url,
        *("tokens", "create", "lead", "--project", "default", "--role", "admin"),
        env=admin,
    )
    lead = {"TRAINPLANE_TOKEN": created.stdout.strip(), "TRAINPLANE_HOME": str(tmp_path / "c2")}
    moved = run_cli(
        secured.url, "projects", "update", "default", "--storage", str(tmp_path / "x"), env=lead
    )
    assert moved.returncode == 1 and "installation" in moved.stderr.lower()
