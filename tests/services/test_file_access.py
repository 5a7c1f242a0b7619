"""What a spec may name on this server (services.file_access): the server's
own folders only under TRAINPLANE_SERVER_PATHS and never inside
TRAINPLANE_HOME; storage and resume only under the project's own root. Pure
rules: no database, no file read, no S3 call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.factories import finetune_spec, small_spec
from trainplane.errors import InvalidInputsError
from trainplane.jobs.spec import parse_spec
from trainplane.services.file_access import FileAccess, ProjectRef, check_spec_locations

ALPHA = ProjectRef("p-alpha", "alpha", None)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home" / "checkpoints").mkdir(parents=True)
    return tmp_path / "home"


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    (tmp_path / "shared" / "code").mkdir(parents=True)
    return tmp_path / "shared"


def access(home: Path, *roots: Path, local_user: bool = False) -> FileAccess:
    return FileAccess(
        default_storage=str(home / "checkpoints"),
        home=home,
        server_paths=tuple(str(root) for root in roots),
        local_user=local_user,
    )


def refusals(spec: dict[str, Any], rules: FileAccess, project: ProjectRef = ALPHA) -> dict:
    try:
        check_spec_locations(parse_spec({**spec, "project": project.name}), project, rules)
    except InvalidInputsError as exc:
        return dict(exc.problems)
    return {}


def train(**fields: Any) -> dict[str, Any]:
    entrypoint = fields.pop("entrypoint", {})
    return small_spec(entrypoint={"command": ["true"], **entrypoint}, **fields)


def finetune(base_model: str, train_file: str, eval_file: str | None = None) -> dict[str, Any]:
    return finetune_spec(base_model=base_model, dataset={"train": train_file, "eval": eval_file})


# --- entrypoint.working_dir -----------------------------------------------------------


def test_a_relative_working_dir_ships_nothing_and_is_fine(home: Path) -> None:
    assert refusals(train(entrypoint={"working_dir": "."}), access(home)) == {}
    assert refusals(train(entrypoint={"working_dir": "code"}), access(home)) == {}


@pytest.mark.parametrize("where", ["home", "etc", "elsewhere"])
def test_a_server_without_server_paths_ships_no_folder_of_its_own(
    home: Path, tmp_path: Path, where: str
) -> None:
    path = {"home": str(home), "etc": "/etc", "elsewhere": str(tmp_path / "gone")}[where]
    problems = refusals(train(entrypoint={"working_dir": path}), access(home))
    message = problems["entrypoint.working_dir"]
    assert "upload it instead" in message and "/v1/projects/alpha/bundles" in message
    assert "does not exist" not in message


def test_server_paths_allow_their_folders_but_never_home(
    home: Path, shared: Path, tmp_path: Path
) -> None:
    rules = access(home, shared, tmp_path)  # tmp_path holds home: home stays refused
    assert refusals(train(entrypoint={"working_dir": str(shared / "code")}), rules) == {}
    refused = refusals(train(entrypoint={"working_dir": str(home / "checkpoints")}), rules)
    assert "entrypoint.working_dir" in refused
    strict = access(home, shared)
    assert "entrypoint.working_dir" in refusals(
        train(entrypoint={"working_dir": str(tmp_path / "shared-old")}), strict
    )


def test_a_symlink_under_a_server_path_leading_out_is_refused(home: Path, shared: Path) -> None:
    (shared / "home-link").symlink_to(home)
    (shared / "etc-link").symlink_to("/etc")
    rules = access(home, shared)
    for link in ("home-link", "etc-link"):
        spec = train(entrypoint={"working_dir": str(shared / link)})
        assert "entrypoint.working_dir" in refusals(spec, rules)


def test_dot_dot_is_refused_even_when_it_resolves_inside(home: Path, shared: Path) -> None:
    spec = train(entrypoint={"working_dir": str(shared / "code" / ".." / "code")})
    assert "'..' segment" in refusals(spec, access(home, shared))["entrypoint.working_dir"]


def test_the_local_user_ships_their_own_folders_but_not_home(home: Path, tmp_path: Path) -> None:
    rules = access(home, local_user=True)
    assert refusals(train(entrypoint={"working_dir": str(tmp_path / "code")}), rules) == {}
    refused = refusals(train(entrypoint={"working_dir": str(home)}), rules)
    assert "TRAINPLANE_HOME" in refused["entrypoint.working_dir"]


# --- a fine-tune's inputs --------------------------------------------------------------


def test_inputs_on_the_server_are_refused_with_every_field_named(home: Path) -> None:
    problems = refusals(finetune("/etc", "/etc/passwd", "/etc/shadow"), access(home))
    assert set(problems) == {"base_model", "dataset.train", "dataset.eval"}
    assert all("upload it instead" in message for message in problems.values())


def test_inputs_in_the_projects_own_storage_are_fine(home: Path) -> None:
    uploads = home / "checkpoints" / "alpha" / "inputs" / ("0" * 64)
    spec = finetune(str(uploads / "model"), str(uploads / "train.jsonl"))
    assert refusals(spec, access(home)) == {}
    # Another project's uploads are not.
    beta = home / "checkpoints" / "beta" / "inputs" / "train.jsonl"
    assert set(refusals(finetune(str(uploads / "model"), str(beta)), access(home))) == {
        "dataset.train"
    }


def test_a_symlink_in_the_projects_storage_leading_out_is_refused(home: Path) -> None:
    inputs = home / "checkpoints" / "alpha" / "inputs"
    inputs.mkdir(parents=True)
    (inputs / "db").symlink_to(home / "trainplane.db")
    problems = refusals(finetune(str(inputs), str(inputs / "db")), access(home))
    assert set(problems) == {"dataset.train"}


def test_an_s3_input_is_read_only_under_an_s3_project_root(home: Path) -> None:
    on_s3 = ProjectRef("p-alpha", "alpha", "s3://team-bucket/alpha")
    fine = finetune("s3://team-bucket/alpha/models/tiny", "s3://team-bucket/alpha/d.jsonl")
    assert refusals(fine, access(home), on_s3) == {}
    elsewhere = finetune("s3://team-bucket/beta/models/tiny", "s3://other/alpha/d.jsonl")
    assert set(refusals(elsewhere, access(home), on_s3)) == {"base_model", "dataset.train"}
    # With a local root, the server reads no bucket at all for a tenant.
    problems = refusals(fine, access(home))
    assert "reads S3 only there" in problems["base_model"]


def test_the_local_user_reads_their_own_files_and_buckets(home: Path, tmp_path: Path) -> None:
    rules = access(home, local_user=True)
    spec = finetune("s3://models/tiny", str(tmp_path / "data" / "train.jsonl"))
    assert refusals(spec, rules) == {}
    assert set(refusals(finetune("s3://models/tiny", str(home / "trainplane.db")), rules)) == {
        "dataset.train"
    }


# --- checkpoint.storage and checkpoint.resume ------------------------------------------


def test_storage_under_the_projects_root_is_fine(home: Path) -> None:
    rules = access(home)
    for storage in (home / "checkpoints", home / "checkpoints" / "alpha" / "sub"):
        assert refusals(train(checkpoint={"storage": str(storage)}), rules) == {}


@pytest.mark.parametrize(
    "storage", ["{tmp}/elsewhere", "{home}/checkpoints/beta", "{home}", "s3://someone-elses/x"]
)
def test_storage_outside_the_projects_root_is_refused_naming_the_root(
    home: Path, tmp_path: Path, storage: str
) -> None:
    storage = storage.format(tmp=tmp_path, home=home)
    message = refusals(train(checkpoint={"storage": storage}), access(home))["checkpoint.storage"]
    assert str(home / "checkpoints" / "alpha") in message


def test_storage_on_s3_must_share_the_roots_bucket_and_prefix(home: Path) -> None:
    on_s3 = ProjectRef("p-alpha", "alpha", "s3://team-bucket/alpha")
    rules = access(home)
    for ok in ("s3://team-bucket/alpha/runs", "s3://team-bucket"):  # <storage>/alpha/<job>
        assert refusals(train(checkpoint={"storage": ok}), rules, on_s3) == {}
    for other in ("s3://team-bucket/alpha-old", "s3://team-bucket/beta", "s3://other/alpha"):
        assert "checkpoint.storage" in refusals(train(checkpoint={"storage": other}), rules, on_s3)


def test_the_local_user_may_keep_checkpoints_in_their_own_folder(
    home: Path, tmp_path: Path
) -> None:
    rules = access(home, local_user=True)
    assert refusals(train(checkpoint={"storage": str(tmp_path / "mine")}), rules) == {}
    beta = home / "checkpoints" / "beta"
    assert "checkpoint.storage" in refusals(train(checkpoint={"storage": str(beta)}), rules)


def test_resume_only_from_the_projects_own_checkpoints(home: Path) -> None:
    rules = access(home)
    own = home / "checkpoints" / "alpha" / "job-1" / "checkpoints" / "step-10"
    assert refusals(train(checkpoint={"resume": str(own)}), rules) == {}
    beta = home / "checkpoints" / "beta" / "job-2" / "checkpoints" / "step-10"
    message = refusals(train(checkpoint={"resume": str(beta)}), rules)["checkpoint.resume"]
    assert "own project" in message
    sneaky = f"{home}/checkpoints/alpha/../beta/job-2/checkpoints/step-10"
    assert (
        "'..' segment" in refusals(train(checkpoint={"resume": sneaky}), rules)["checkpoint.resume"]
    )


def test_every_offending_field_is_named_at_once(home: Path) -> None:
    spec = train(
        entrypoint={"working_dir": "/etc"},
        checkpoint={"storage": "s3://xbucket/y", "resume": "s3://xbucket/y/checkpoints/step-1"},
    )
    assert set(refusals(spec, access(home))) == {
        "entrypoint.working_dir",
        "checkpoint.storage",
        "checkpoint.resume",
    }
