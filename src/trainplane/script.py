"""What a script (``entrypoint.script`` or ``command``) calls to get what a
train function gets: metrics in the control plane, checkpoints on the job's
storage with resume, preemption notices and a model to register (DESIGN.md,
"Scripts and trainers")::

    from trainplane import script

    start = load(script.resume_from()) if script.resume_from() else 0
    for step in range(start + 1, steps + 1):
        ...
        script.report({"loss": loss}, step)
        if step % 10 == 0 or script.should_stop():
            save(model, script.checkpoint_dir())  # every rank, its own files
            script.checkpoint(step)
            ...

Outside trainplane every call still works: reports go nowhere (or to
``TRAINPLANE_METRICS_FILE``), folders are under the working directory and
``checkpoint`` publishes nothing.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainplane.runtime import env as tp_env

__all__ = ["checkpoint", "checkpoint_dir", "model_dir", "report", "resume_from", "should_stop"]

PREEMPTED = "preempted"  # the manifest's reason of a save after should_stop() (or "pruned")
FINAL_REPORT = "final-report.json"  # in the sync folder: rank 0's last report, at exit
CLOSE_SECONDS = 10.0  # at exit, how long the last reports may take to send


def report(metrics: Mapping[str, Any], step: int) -> None:
    """Record ``metrics`` (numbers, or one-element tensors) at ``step``. Rank 0
    sends them to the control plane off the training thread; the other ranks'
    calls do nothing. Values that are not numbers are dropped."""
    session = _session()
    if session.rank != 0:
        return
    if isinstance(step, bool) or int(step) < 0:
        raise ValueError(f"step must be a non-negative integer, not {step!r}")
    session.report(int(step), _numbers(metrics))


def checkpoint_dir() -> str:
    """The folder to save a checkpoint's files into (shared by the ranks of a
    node), then call :func:`checkpoint`."""
    return _folder(tp_env.CHECKPOINT_DIR, "checkpoints")


def checkpoint(
    step: int,
    *,
    folder: str | os.PathLike[str] | None = None,
    metrics: Mapping[str, Any] | None = None,
) -> str | None:
    """Publish what was saved for ``step`` as the job's checkpoint ``step-<step>``.
    Every rank calls it, after writing its files into ``folder`` (default:
    :func:`checkpoint_dir`, emptied once published; a folder given is left as
    it is). ``metrics`` (default: the latest value of each metric rank 0
    reported) go into the manifest, for ``keep_best``. Returns the
    checkpoint's URI on rank 0, once it is complete; None on other ranks,
    and where the job has no checkpoint storage."""
    session = _session()
    publisher = session.publisher()
    if publisher is None:
        session.say_once("no checkpoint storage: checkpoints are not published")
        return None
    chosen = Path(folder) if folder is not None else Path(checkpoint_dir())
    values = _numbers(metrics) if metrics is not None else dict(session.latest)
    uri = publisher.publish(
        int(step),
        chosen,
        metrics=values,
        reason=session.stopping,
        empty_after=folder is None,
    )
    if session.reporter is not None:
        # A run resumed from this checkpoint reports only the steps after it:
        # the ones up to it must have reached the control plane.
        session.reporter.flush()
    return uri


def resume_from() -> str | None:
    """The local folder holding the checkpoint to resume from; None on a fresh start."""
    return os.environ.get(tp_env.RESUME_FROM) or None


def model_dir() -> str:
    """Where rank 0 saves the final model (registered with ``register_model``)."""
    return _folder(tp_env.MODEL_DIR, "model")


def should_stop() -> bool:
    """True once the control plane asked this attempt to stop (a preemption):
    save with :func:`checkpoint` and exit 0; the job resumes from it later.
    With a torch.distributed process group of more than one rank it is
    collective (rank 0's answer is broadcast): call it on every rank at the
    same step."""
    from trainplane.runtime.stop_watch import broadcast_flag, process_group_size

    session = _session()
    if process_group_size() > 1:
        asked = broadcast_flag(session.rank == 0 and session.asked())
    else:
        asked = session.asked()
    if asked and session.stopping is None:
        # The manifest's reason: "pruned" for a sweep's trial, else "preempted".
        from trainplane.runtime.preemption import checkpoint_reason

        session.stopping = checkpoint_reason(session.watch().reason)
    return asked


def _folder(variable: str, fallback: str) -> str:
    folder = os.environ.get(variable) or os.path.abspath(fallback)
    os.makedirs(folder, exist_ok=True)
    return folder


def _numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of ``metrics``; a tensor or NumPy scalar by its ``item()``."""
    values = {}
    for name, value in metrics.items():
        if hasattr(value, "item") and not isinstance(value, int | float):
            try:
                value = value.item()
            except (TypeError, ValueError, RuntimeError):
                continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if number and math.isfinite(value):
            values[str(name)] = float(value)
    return values


class _Session:
    """This process's reporter, stop watch and publisher, made on first use."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.rank = int(environ.get("RANK") or 0)
        self.reporter: Any = None
        self.latest: dict[str, float] = {}  # the latest value of each metric reported
        self.step: int | None = None
        # Set once should_stop() said True in this process: the reason the
        # next checkpoint's manifest gives ("preempted" or "pruned").
        self.stopping: str | None = None
        self.said: set[str] = set()
        self._watch: Any = None
        self._publisher: Any = None
        self._lock = threading.Lock()

    def say_once(self, message: str) -> None:
        if self.rank == 0 and message not in self.said:
            self.said.add(message)
            print(f"trainplane: {message}", flush=True)

    # --- reports (rank 0) ---------------------------------------------------------
    def report(self, step: int, values: dict[str, float]) -> None:
        self.step = step
        self.latest.update(values)
        try:
            self._reporter().record(step, values, None)
        except Exception as exc:  # the control plane's trouble never ends training
            self.say_once(f"progress reports failed: {type(exc).__name__}: {exc}")

    def _reporter(self) -> Any:
        if self.reporter is None:
            with self._lock:
                if self.reporter is None:
                    from trainplane.runtime.reporting import ProgressReporter, decision_steps_of

                    environ = self.environ
                    self.reporter = ProgressReporter(
                        url=environ.get(tp_env.CONTROL_PLANE_URL),
                        job_id=environ.get(tp_env.JOB_ID),
                        attempt_id=environ.get(tp_env.ATTEMPT_ID),
                        token=environ.get(tp_env.ATTEMPT_TOKEN),
                        metrics_file=environ.get(tp_env.METRICS_FILE),
                        on_stop=self.watch().heard,
                        decision_steps=decision_steps_of(environ),
                    )
                    atexit.register(self.close)
        return self.reporter

    def close(self) -> None:
        """At exit: the last reports sent (a bounded wait), and the last one
        left for the model's registration."""
        try:
            self.reporter.close(CLOSE_SECONDS)
            sync = self.environ.get(tp_env.SYNC_DIR)
            if sync and self.step is not None:
                Path(sync).mkdir(parents=True, exist_ok=True)
                final = {"step": self.step, "metrics": self.latest}
                (Path(sync) / FINAL_REPORT).write_text(json.dumps(final))
        except Exception as exc:
            print(f"trainplane: the last progress report failed: {exc}", flush=True)

    # --- stop requests ----------------------------------------------------------
    def watch(self) -> Any:
        if self._watch is None:
            from trainplane.runtime.reporting import progress_endpoint
            from trainplane.runtime.stop_watch import StopWatch

            environ = self.environ
            token = environ.get(tp_env.ATTEMPT_TOKEN)
            sync = environ.get(tp_env.SYNC_DIR)
            self._watch = StopWatch(
                rank=self.rank,
                local_rank=int(environ.get("LOCAL_RANK") or 0),
                sync_dir=Path(sync) if sync else None,
                endpoint=progress_endpoint(
                    environ.get(tp_env.CONTROL_PLANE_URL),
                    environ.get(tp_env.JOB_ID),
                    environ.get(tp_env.ATTEMPT_ID),
                    token,
                ),
                token=token,
            )
        return self._watch

    def asked(self) -> bool:
        if self.rank == 0:
            self._reporter()  # it hears the stop in the answers to its reports
        return bool(self.watch().asked())

    # --- checkpoints ------------------------------------------------------------
    def publisher(self) -> Any:
        """None when the job has no checkpoint storage."""
        uri = self.environ.get(tp_env.CHECKPOINT_URI)
        if self._publisher is None and uri:
            from trainplane.jobs.spec import Checkpoint, Strategy, load_spec
            from trainplane.runtime.script_checkpoints import Placement, Publisher
            from trainplane.storage.backends import StorageError, open_storage

            environ = self.environ
            placement = Placement.from_env(environ, tp_env.NODES)
            sync = environ.get(tp_env.SYNC_DIR)
            if not sync and placement.world_size > 1:
                raise StorageError(
                    f"{tp_env.SYNC_DIR} is not set: ranks of more than one process "
                    "publish a checkpoint together through it"
                )
            document = environ.get(tp_env.SPEC)
            spec = load_spec(json.loads(document)) if document else None
            self._publisher = Publisher(
                storage=open_storage(uri),
                sync_dir=Path(sync or tempfile.mkdtemp(prefix="trainplane-sync-")),
                placement=placement,
                policy=spec.checkpoint if spec is not None else Checkpoint(),
                strategy=(spec.strategy if spec is not None else Strategy()).type,
                job_id=environ.get(tp_env.JOB_ID),
                attempt_id=environ.get(tp_env.ATTEMPT_ID),
                log=lambda line: print(line, flush=True),
            )
        return self._publisher


_current: _Session | None = None


def _session() -> _Session:
    global _current
    if _current is None:
        _current = _Session(os.environ)
    return _current
