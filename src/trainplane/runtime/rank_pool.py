"""A warm parent for rank processes: torch and trainplane's runtime already
imported, so a rank starts in milliseconds instead of paying their import.

One parent per Ray node, per project and per Python environment (the
interpreter and trainplane's own files) listens on a Unix socket in a
folder only its user can open. A Ray Train worker (runtime.ray_train) asks it
for a rank process with the rank's whole environment and working directory,
and hands it the pipe the rank's output goes to. The parent forks a *minder*
for the request and goes back to listening; the minder forks the rank, which
takes the environment, folder and ``sys.path`` it was given and runs
``runtime.local``. The minder reports the rank's exit code back on the socket,
and kills the rank if the worker goes away (the socket closes), as the kernel
does for a rank the worker started itself.

The parent never runs training, opens no CUDA context and holds no job's
state: every rank is a fresh fork of the state it had right after its imports.
It holds no Ray resources and no GPU; the ranks it forks run under their Ray
Train worker's. It exits after ``idle`` seconds without a request. The first
worker that finds no parent starts one, through a detached keeper actor on its
node (no CPU, no GPU; it ends with its parent), and starts its own rank the
usual way meanwhile. ``TRAINPLANE_RANK_POOL_IDLE_SECONDS`` (set by the scheduler from
its ``rank_pool_idle_seconds``; a job's ``entrypoint.env`` may set it to 0) is
how long it waits; 0 turns the pool off.

What only takes effect as a process starts (the dynamic loader's ``LD_*``,
the interpreter's ``PYTHON*`` flags, the allocator's and OpenMP's settings)
cannot be given to a forked rank: those variables, as the rank would have them,
are part of the pool's key, and a parent is started with them. A forked rank
names itself in its command line (``trainplane.runtime.local rank R attempt
A``, via setproctitle); its ``/proc/<pid>/environ`` stays its parent's.

    python -m trainplane.runtime.rank_pool <socket path> <idle seconds>
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

IDLE_ENV = "TRAINPLANE_RANK_POOL_IDLE_SECONDS"
_MAX_REQUEST = 4 * 1024 * 1024  # a rank's whole environment, spec included
# What a parent keeps of the environment of the worker that starts it.
_PARENT_ENV = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "LD_LIBRARY_PATH")


def idle_seconds(environ: dict[str, str] | os._Environ[str] = os.environ) -> float:
    """How long a parent waits for work; 0: the pool is off."""
    try:
        return max(0.0, float(environ.get(IDLE_ENV, "0")))
    except ValueError:
        return 0.0


# Read by the loader, the interpreter, the allocator or OpenMP as a process
# starts, so a fork cannot take them from the rank's environment. PYTHONPATH
# and PYTHONUNBUFFERED are applied in the fork (_become_rank). OMP_NUM_THREADS
# above all: Ray sets it to a worker's CPUs (1 by default), and a rank forked
# from a parent without it runs torch's pool on every core (two ranks on 2
# cores trained at a fifth of their speed).
_START_PREFIXES = ("LD_", "PYTHON", "MALLOC_", "GLIBC_", "OMP_", "KMP_", "GOMP_", "MKL_")
_APPLIED_IN_FORK = frozenset({"PYTHONPATH", "PYTHONUNBUFFERED"})


def start_time_env(env: dict[str, str]) -> dict[str, str]:
    """The variables of ``env`` that only a fresh process would honour."""
    return {
        key: value
        for key, value in env.items()
        if key.startswith(_START_PREFIXES) and key not in _APPLIED_IN_FORK
    }


def socket_path(project: str, env: dict[str, str] | None = None) -> Path:
    """Where this project's parent for this Python environment (and these
    start-time variables of the rank's ``env``) listens."""
    import trainplane

    package = Path(trainplane.__file__).parent
    newest = max(path.stat().st_mtime_ns for path in package.glob("runtime/*.py"))
    key = json.dumps(
        [
            project,
            sys.executable,
            sys.prefix,
            trainplane.__version__,
            newest,
            _ray_node(),
            sorted(start_time_env(env or {}).items()),
        ]
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    folder = Path(tempfile.gettempdir()) / f"trainplane-rank-pool-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / f"{digest}.sock"


def _ray_node() -> str:
    """This Ray node's id: two clusters on one machine keep their pools apart."""
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""


class PooledRank:
    """A rank process forked by the pool: its output and its exit code, as
    ``subprocess.Popen`` gives them (a negative code: killed by that signal)."""

    def __init__(self, connection: socket.socket, output: Any) -> None:
        self._connection = connection
        self.stdout = output

    def wait(self) -> int:
        with self._connection.makefile("r") as answers:
            answer = answers.readline()
        self._connection.close()
        try:
            return int(json.loads(answer)["exit"])
        except (ValueError, KeyError, TypeError):
            return 1  # the minder is gone without an answer


def start_rank(project: str, env: dict[str, str], cwd: str, idle: float) -> PooledRank | None:
    """A rank process from the pool, or None (after starting a parent for
    the next time, when none answers): the caller then starts its own."""
    path = socket_path(project, env)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(path))
    except OSError:
        connection.close()
        _start_parent(path, idle, start_time_env(env))
        return None
    read_end, write_end = os.pipe()
    try:
        request = json.dumps({"env": env, "cwd": cwd}).encode() + b"\n"
        socket.send_fds(connection, [request], [write_end])
    except OSError:
        connection.close()
        os.close(read_end)
        return None
    finally:
        os.close(write_end)
    return PooledRank(connection, os.fdopen(read_end, "rb"))


def start_rank_process(
    env: dict[str, str], *, project: str
) -> PooledRank | subprocess.Popen[bytes]:
    """The rank process of a Ray Train worker (``python -m trainplane.runtime.local``
    with ``env``, in this folder): forked by the pool when it is on and has a
    parent up, else started here."""
    idle = idle_seconds(env)
    if idle > 0:
        pooled = start_rank(project, env, os.getcwd(), idle)
        if pooled is not None:
            return pooled
    from trainplane.runtime.processes import die_with_parent

    return subprocess.Popen(
        [sys.executable, "-m", "trainplane.runtime.local"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=die_with_parent,
    )


def _start_parent(
    path: Path, idle: float, start_env: dict[str, str]
) -> subprocess.Popen[bytes] | None:
    """Inside Ray, a detached keeper actor on this node starts the parent:
    Ray kills whatever a job's worker leaves behind, wherever it went, and the
    parent must outlive the job. Outside Ray, a process of its own."""
    import ray

    if not ray.is_initialized():
        return _spawn_parent(path, idle, start_env, new_session=True)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    keeper = ray.remote(ParentKeeper).options(
        name=f"trainplane-rank-pool-{path.stem}",
        namespace="trainplane",
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,  # it only waits: the ranks run on their workers' resources
        max_restarts=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=False
        ),
    )
    keeper.remote(str(path), idle, start_env)
    return None


def _spawn_parent(
    path: Path, idle: float, start_env: dict[str, str], *, new_session: bool
) -> subprocess.Popen[bytes]:
    # Nothing of the job that starts it: not its folder, nor its environment
    # (a PYTHONPATH naming its code would reach every later job's ranks), but
    # the start-time variables its key was made of.
    env = {key: os.environ[key] for key in _PARENT_ENV if key in os.environ}
    env.update(start_env)
    return subprocess.Popen(
        [sys.executable, "-m", "trainplane.runtime.rank_pool", str(path), f"{idle:g}"],
        cwd=tempfile.gettempdir(),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=new_session,
        close_fds=True,
    )


class ParentKeeper:
    """A detached Ray actor holding one parent (no CPU, no GPU), gone with it."""

    def __init__(self, path: str, idle: float, start_env: dict[str, str]) -> None:
        import threading

        self._parent = _spawn_parent(Path(path), idle, start_env, new_session=False)
        threading.Thread(target=self._end_with_parent, daemon=True).start()

    def _end_with_parent(self) -> None:
        import ray

        self._parent.wait()
        ray.kill(ray.get_runtime_context().current_actor)


# --- the parent ----------------------------------------------------------------------


def serve(path: Path, idle: float) -> None:
    # Listening under a name of its own until the imports are done, then
    # linked into place: a second parent started in a race finds the name
    # taken and leaves, and no worker waits on a parent still importing.
    staging = path.with_name(f"{path.name}.{os.getpid()}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(staging))
    listener.listen(64)
    import trainplane.runtime.local  # noqa: F401  the point of the pool

    try:
        if not _claim(staging, path):
            return  # another parent serves this pool
    finally:
        staging.unlink(missing_ok=True)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # minders are reaped by the kernel
    listener.settimeout(idle)
    try:
        while True:
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                return
            if os.fork() == 0:
                listener.close()
                os._exit(_mind(connection))
            connection.close()
    finally:
        # Only our own name: a parent that replaced it serves on.
        if path.exists() and path.stat().st_ino == os.fstat(listener.fileno()).st_ino:
            path.unlink(missing_ok=True)
        listener.close()


def _claim(staging: Path, path: Path) -> bool:
    """Link our socket in as ``path``; a name left by a parent that died is taken over."""
    for _ in range(2):
        try:
            os.link(staging, path)
            return True
        except FileExistsError:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(path))
                return False  # alive
            except OSError:
                path.unlink(missing_ok=True)
            finally:
                probe.close()
    return False


def _mind(connection: socket.socket) -> int:
    """The minder of one rank: fork it, report its exit, kill it if the worker goes."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    connection.settimeout(None)
    try:
        data, fds, _, _ = socket.recv_fds(connection, _MAX_REQUEST, 1)
        request = json.loads(data)
    except (OSError, ValueError):
        return 1
    if not fds:
        return 1
    rank = os.fork()
    if rank == 0:
        connection.close()
        _become_rank(request["env"], request["cwd"], fds[0])
    os.close(fds[0])
    import select

    while True:
        ready, _, _ = select.select([connection], [], [], 0.5)
        if ready and not connection.recv(1):  # the worker is gone
            os.kill(rank, signal.SIGKILL)
        done, status = os.waitpid(rank, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):  # the worker is gone: no one to tell
                connection.sendall(json.dumps({"exit": code}).encode() + b"\n")
            return 0


def _become_rank(env: dict[str, str], cwd: str, output: int) -> None:
    """In the forked rank: what a fresh ``python -m trainplane.runtime.local``
    started by the worker would have, then run it. Never returns."""
    code = 1
    try:
        from trainplane.runtime.processes import die_with_parent

        die_with_parent()  # with its minder, as with its worker otherwise
        # No session of its own: with the kernel's autogroup scheduling, a
        # session is a scheduling group, and two ranks in groups of their own
        # shared 2 cores with Ray's processes so badly that they trained at
        # 0.8x a fresh rank's speed. In its parent's session (the Ray node's, by
        # the keeper actor) it is scheduled as a rank the worker started.
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.chdir(cwd)
        # Before the environment is cleared: setproctitle finds the room for
        # the title from where the process's environment strings are.
        _name_process(env)
        os.environ.clear()
        os.environ.update(env)
        extra = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
        sys.path[:] = [cwd, *extra, *(entry for entry in sys.path[1:] if entry not in extra)]
        sys.argv = [sys.argv[0]]
        # As PYTHONUNBUFFERED would have made them: the worker forwards lines as they come.
        sys.stdout.reconfigure(line_buffering=True, write_through=True)
        sys.stderr.reconfigure(line_buffering=True, write_through=True)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        from trainplane.runtime.local import main

        code = main([])
    except BaseException:  # the rank's own failures are reported by main
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _name_process(env: dict[str, str]) -> None:
    """The rank's command line says what it is (``ps``, and whoever looks
    for a job's ranks by it), not the parent's ``rank_pool`` line it forked with."""
    try:
        from setproctitle import setproctitle
    except ImportError:  # an image without it: the ranks still run
        return
    from trainplane.runtime import env as tp_env

    rank = env.get("RANK", "?")
    attempt = env.get(tp_env.ATTEMPT_ID, "-")
    setproctitle(f"{sys.executable} -m trainplane.runtime.local rank {rank} attempt {attempt}")


if __name__ == "__main__":
    serve(Path(sys.argv[1]), float(sys.argv[2]))
