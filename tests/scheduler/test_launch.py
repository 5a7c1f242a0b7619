"""What an attempt is launched with, and when a running attempt counts as
stuck: pure functions, no cluster."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tests.factories import small_spec
from trainplane.backends.ray import RayClusters
from trainplane.db.base import utcnow
from trainplane.jobs.spec import parse_spec
from trainplane.jobs.states import AttemptStatus, JobStatus
from trainplane.runtime import env as tp_env
from trainplane.runtime.start_timeout import FIXED_START_TIMEOUT, START_TIMEOUT_ENV
from trainplane.scheduler.launch import LaunchError, launch_request, resuming_spec
from trainplane.scheduler.steps import AdvanceContext, advance, is_stuck
from trainplane.services.attempts import AttemptWork, Outcome, Rejected, parse_stored_spec
from trainplane.services.file_access import FileAccess

pytestmark = pytest.mark.ray_free


def _spec(**overrides):
    return parse_spec(small_spec(**overrides))


def _request(
    spec, restarts_used=0, *, access=None, start_timeout=FIXED_START_TIMEOUT, decision_steps=()
):
    return launch_request(
        job_id="job-1",
        attempt_id="attempt-1",
        restarts_used=restarts_used,
        spec=spec,
        accelerator="cpu",
        control_plane_url="http://tp:8080",
        attempt_token="t" * 64,
        checkpoint_dir="/ckpt/default/job-1/checkpoints",
        model_dir="/ckpt/default/job-1/model",
        access=access,
        project="alpha",
        start_timeout=start_timeout,
        decision_steps=decision_steps,
    )


def _env(spec, restarts_used=0, *, start_timeout=FIXED_START_TIMEOUT):
    return _request(spec, restarts_used, start_timeout=start_timeout).runtime_env["env_vars"]


def test_an_attempt_gets_its_token_checkpoint_and_model_folders_and_url():
    env = _env(_spec())
    assert env[tp_env.ATTEMPT_TOKEN] == "t" * 64
    assert env[tp_env.CHECKPOINT_URI] == "/ckpt/default/job-1/checkpoints"
    assert env[tp_env.MODEL_URI] == "/ckpt/default/job-1/model"
    assert env[tp_env.CONTROL_PLANE_URL] == "http://tp:8080"
    assert (env[tp_env.JOB_ID], env[tp_env.ATTEMPT_ID]) == ("job-1", "attempt-1")


def test_only_a_sweeps_trial_gets_decision_steps():
    assert tp_env.DECISION_STEPS not in _env(_spec())  # nothing changes for other jobs
    request = _request(_spec(), decision_steps=(10, 30, 90))
    assert request.runtime_env["env_vars"][tp_env.DECISION_STEPS] == "10,30,90"


def test_the_launch_hands_the_clusters_wait_to_ray_train_and_the_gang():
    assert _env(_spec(), start_timeout=900.0)[START_TIMEOUT_ENV] == "900"


def test_the_jobs_own_env_still_sets_the_wait():
    spec = _spec(entrypoint={"command": ["true"], "env": {START_TIMEOUT_ENV: "5"}})
    assert _env(spec, start_timeout=900.0)[START_TIMEOUT_ENV] == "5"


def test_every_ranks_line_is_kept_in_the_job_log():
    # Ray folds lines that differ only in numbers (the rank tag) into one.
    assert _env(_spec())["RAY_DEDUP_LOGS"] == "0"


@pytest.mark.parametrize(("used", "left"), [(0, "2"), (1, "1"), (2, "0"), (4, "0")])
def test_restarts_left_count_down_with_the_restarts_used(used, left):
    assert _env(_spec(retries={"max_restarts": 2}), used)[tp_env.RESTARTS_LEFT] == left


def test_an_attempt_after_a_preemption_resumes_whatever_the_spec_says():
    spec = _spec(checkpoint={"every_steps": 5, "resume": "never"})
    resumed = resuming_spec(spec)
    assert resumed.checkpoint.resume == "auto"
    assert resumed.checkpoint.every_steps == 5
    assert spec.checkpoint.resume == "never"  # the job's own spec is left alone
    auto = _spec(checkpoint={"every_steps": 5})
    assert resuming_spec(auto) is auto


def _work(*, last_progress_at, stuck_after_seconds=None):
    now = utcnow()
    return AttemptWork(
        attempt_id="a",
        lease_token="l",
        job_id="j",
        project_name="default",
        folder=None,
        number=1,
        status=AttemptStatus.RUNNING,
        job_status=JobStatus.RUNNING,
        stop_reason=None,
        cluster_name="local",
        cluster_address="http://ray:8265",
        accelerator="cpu",
        spec=None,
        created_at=now,
        last_seen_at=now,
        job_started_at=now,
        max_runtime_seconds=None,
        progress_step=3 if last_progress_at else None,
        last_progress_at=last_progress_at,
        stuck_after_seconds=stuck_after_seconds,
    )


def test_stuck_is_no_new_step_for_longer_than_stuck_after():
    now = utcnow()
    recent = _work(last_progress_at=now - timedelta(seconds=50))
    assert not is_stuck(recent, now, default_seconds=60)
    assert is_stuck(recent, now, default_seconds=40)
    # The job's own stuck_after wins over the server's default.
    own = _work(last_progress_at=now - timedelta(seconds=50), stuck_after_seconds=30)
    assert is_stuck(own, now, default_seconds=1800)


def test_an_attempt_that_never_reported_is_never_stuck():
    assert not is_stuck(_work(last_progress_at=None), utcnow(), default_seconds=1)


# --- the working_dir is asked about again at launch ----------------------------------


def _access(tmp_path, *roots, local_user=False):
    return FileAccess(
        default_storage=str(tmp_path / "home" / "checkpoints"),
        home=tmp_path / "home",
        server_paths=tuple(str(root) for root in roots),
        local_user=local_user,
    )


def _with_working_dir(path):
    return _spec(entrypoint={"command": ["true"], "working_dir": str(path)})


def test_a_folder_the_rule_now_refuses_is_never_shipped(tmp_path):
    code = tmp_path / "shared" / "code"
    code.mkdir(parents=True)
    (tmp_path / "home").mkdir()
    allowed = _access(tmp_path, tmp_path / "shared")
    assert _request(_with_working_dir(code), access=allowed).runtime_env["working_dir"] == str(code)
    # The operator's list shrank since the job was accepted.
    with pytest.raises(LaunchError, match=r"^entrypoint\.working_dir: .* upload it instead"):
        _request(_with_working_dir(code), access=_access(tmp_path))
    # A spec accepted before there was a rule at all.
    for path in ("/etc", tmp_path / "home"):
        with pytest.raises(LaunchError, match=r"^entrypoint\.working_dir"):
            _request(_with_working_dir(path), access=allowed)


def test_the_local_users_folders_ship_but_never_trainplanes_own(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (tmp_path / "home").mkdir()
    mine = _access(tmp_path, local_user=True)
    assert _request(_with_working_dir(code), access=mine).runtime_env["working_dir"] == str(code)
    with pytest.raises(LaunchError, match="TRAINPLANE_HOME"):
        _request(_with_working_dir(tmp_path / "home"), access=mine)


def test_a_scheduler_told_nothing_ships_no_folder_and_relative_ones_ship_nothing(tmp_path):
    with pytest.raises(LaunchError, match="ships no folder of its own"):
        _request(_with_working_dir(tmp_path))
    env = _request(_spec(entrypoint={"command": ["true"], "working_dir": "code"}))
    assert "working_dir" not in env.runtime_env


def _launch_nowhere(tmp_path, **fields) -> Outcome:
    """What advancing a pending attempt with ``fields`` comes to, with no
    cluster answering: a refusal must come before any cluster is asked."""
    work = replace(
        _work(last_progress_at=None),
        status=AttemptStatus.PENDING,
        cluster_address="http://127.0.0.1:9",  # nothing answers there
        **fields,
    )
    context = AdvanceContext(
        control_plane_url=None,
        checkpoint_storage=str(tmp_path / "ckpt"),
        stuck_after_seconds=60,
        token_key=b"k" * 32,
        file_access=_access(tmp_path),
    )
    return advance(work, RayClusters(), utcnow(), context=context)


def test_the_attempt_fails_naming_the_field_before_the_cluster_is_asked(tmp_path):
    outcome = _launch_nowhere(tmp_path, spec=_with_working_dir("/etc"))
    assert isinstance(outcome, Rejected)
    assert outcome.message.startswith("entrypoint.working_dir: '/etc' names a folder on the server")


def test_a_stored_spec_that_no_longer_parses_fails_its_launch_naming_the_field(tmp_path):
    stored = _spec().model_dump(mode="json")
    stored["resources"] = {**stored["resources"], "gpus_per_node": 3}  # 2 GPUs on 3 a node
    spec, spec_error = parse_stored_spec(stored)  # as the claim parses it
    assert spec is None
    outcome = _launch_nowhere(tmp_path, spec=spec, spec_error=spec_error)
    assert isinstance(outcome, Rejected)
    assert "`resources`: gpus (2) must be a multiple of gpus_per_node (3)" in outcome.message


def test_the_rank_pool_reaches_the_runtime_as_the_server_and_the_job_say():
    from trainplane.config import Settings
    from trainplane.runtime.rank_pool import IDLE_ENV, idle_seconds

    spec = _spec()
    common = dict(
        job_id="job-1",
        attempt_id="attempt-1",
        restarts_used=0,
        spec=spec,
        accelerator="cpu",
        control_plane_url=None,
        attempt_token="t" * 64,
        checkpoint_dir="/ckpt",
        model_dir="/model",
    )
    assert Settings().rank_pool_idle_seconds == 300  # on unless the operator turns it off
    off = launch_request(**common).runtime_env["env_vars"]
    assert IDLE_ENV not in off and idle_seconds(off) == 0
    on = launch_request(**common, rank_pool_idle_seconds=300).runtime_env["env_vars"]
    assert on[IDLE_ENV] == "300" and idle_seconds(on) == 300
    # A job may turn it off for itself.
    entrypoint = {**spec.entrypoint.model_dump(), "env": {IDLE_ENV: "0"}}
    opted_out = spec.model_copy(update={"entrypoint": type(spec.entrypoint)(**entrypoint)})
    own = launch_request(**{**common, "spec": opted_out}, rank_pool_idle_seconds=300)
    assert idle_seconds(own.runtime_env["env_vars"]) == 0
