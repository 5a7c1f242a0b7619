"""runtime.rank_pool: rank processes forked from a warm parent are what a
fresh ``python -m trainplane.runtime.local`` would be, each on its own, and
never outlive their worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from trainplane.runtime import rank_pool

CODE = """\
import os, sys, time

def train_loop(ctx):
    print("pid", os.getpid(), flush=True)
    print("seen", os.getcwd(), os.environ.get("MARKER"), sys.path[0], flush=True)
    print("hash randomization", sys.flags.hash_randomization, flush=True)
    import torch
    print("threads", torch.get_num_threads(), flush=True)
    mode = os.environ.get("MODE")
    if mode == "fail":
        raise RuntimeError("boom")
    if mode == "hang":
        time.sleep(120)
"""


def rank_env(marker: str, mode: str = "") -> dict[str, str]:
    spec = {
        "kind": "train",
        "name": "pool",
        "entrypoint": {"function": "train:train_loop"},
        "resources": {"gpus": 1},
    }
    return {
        "PATH": os.environ["PATH"],
        "TRAINPLANE_SPEC": json.dumps(spec),
        "TRAINPLANE_DEVICE": "cpu",
        **{"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"},
        "MARKER": marker,
        "MODE": mode,
        "TRAINPLANE_ATTEMPT_ID": f"attempt-{marker}",
        rank_pool.IDLE_ENV: "60",
    }


@pytest.fixture(scope="module")
def pool():
    project = f"test-{uuid.uuid4().hex[:8]}"
    path = rank_pool.socket_path(project)
    parent = subprocess.Popen(
        [sys.executable, "-m", "trainplane.runtime.rank_pool", str(path), "60"]
    )
    deadline = time.monotonic() + 120
    while not path.exists():
        assert parent.poll() is None and time.monotonic() < deadline, "the parent never listened"
        time.sleep(0.1)
    yield project
    parent.send_signal(signal.SIGTERM)
    parent.wait(10)
    path.unlink(missing_ok=True)


def run(project, folder, env):
    previous = os.getcwd()
    os.chdir(folder)
    try:
        rank = rank_pool.start_rank(project, env, str(folder), 60)
    finally:
        os.chdir(previous)
    assert isinstance(rank, rank_pool.PooledRank)
    return rank


def test_each_rank_gets_its_own_folder_environment_and_exit_code(pool, tmp_path):
    lines = {}
    for name, mode in (("one", ""), ("two", "fail")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "train.py").write_text(CODE)
        rank = run(pool, folder, rank_env(name, mode))
        output = rank.stdout.read().decode()
        lines[name] = next(line for line in output.splitlines() if line.startswith("seen"))
        assert rank.wait() == (1 if mode else 0), output
        if mode == "fail":
            assert "RuntimeError: boom" in output
    assert lines["one"] == f"seen {tmp_path / 'one'} one {tmp_path / 'one'}"
    # Nothing of the first rank reaches the second: its module, folder, variables.
    assert lines["two"] == f"seen {tmp_path / 'two'} two {tmp_path / 'two'}"


def test_a_rank_whose_worker_is_gone_is_killed(pool, tmp_path):
    (tmp_path / "train.py").write_text(CODE)
    rank = run(pool, tmp_path, rank_env("hang", "hang"))
    pid = int(rank.stdout.readline().split()[1])
    assert psutil.pid_exists(pid)
    # It says what it is, not the parent's command line it was forked with.
    command = " ".join(psutil.Process(pid).cmdline())
    assert "trainplane.runtime.local rank 0 attempt attempt-hang" in command, command
    assert "rank_pool" not in command
    # Scheduled with its parent's session, not in a group of its own.
    assert os.getsid(pid) != pid
    rank._connection.close()  # as when the worker process dies
    deadline = time.monotonic() + 30
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the rank outlived its worker"
        time.sleep(0.1)


def test_off_or_without_a_parent_the_worker_starts_its_own_rank(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(CODE)
    rank = rank_pool.start_rank_process({**rank_env("own"), rank_pool.IDLE_ENV: "0"}, project="x")
    assert isinstance(rank, subprocess.Popen)
    assert b"seen" in rank.stdout.read()
    assert rank.wait() == 0


def test_what_only_a_fresh_process_honours_gets_a_parent_started_with_it(pool, tmp_path):
    # PYTHONHASHSEED is read as the interpreter starts, OMP_NUM_THREADS as
    # torch's thread pool does: a fork of the pool's parent would ignore them.
    # Such a job gets a parent of its own, which has them.
    (tmp_path / "train.py").write_text(CODE)
    seeded = {**rank_env("seeded"), "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    one_thread = {**rank_env("x"), "OMP_NUM_THREADS": "1"}
    assert rank_pool.socket_path(pool, one_thread) != rank_pool.socket_path(pool, rank_env("x"))
    assert rank_pool.socket_path(pool, seeded) != rank_pool.socket_path(pool, one_thread)
    assert rank_pool.socket_path(pool, rank_env("x")) == rank_pool.socket_path(pool, {})
    path = rank_pool.socket_path(pool, seeded)
    assert rank_pool.start_rank(pool, seeded, str(tmp_path), 60) is None  # none yet: started
    try:
        deadline = time.monotonic() + 120
        while not path.exists():
            assert time.monotonic() < deadline, "the seeded parent never listened"
            time.sleep(0.1)
        rank = run(pool, tmp_path, seeded)
        output = rank.stdout.read().decode()
        assert rank.wait() == 0, output
        assert "hash randomization 0" in output and "threads 1" in output, output
    finally:
        for process in psutil.process_iter(["cmdline"]):
            if str(path) in (process.info["cmdline"] or []):
                process.terminate()
    plain = run(pool, tmp_path, rank_env("plain"))
    assert "hash randomization 1" in plain.stdout.read().decode()
    assert plain.wait() == 0
