"""The entrypoint of every attempt's Ray job: ``python -m trainplane.runtime.driver``.

It reads the job's spec from the environment and parses it once
(``jobs.spec.load_spec``); everything below takes the typed spec. A train function runs through
Ray Train (or inline for one worker); a script or command runs once per worker
of a gang placed here, with torchrun's environment. Its exit code is
the job's: 0 when every rank succeeded, otherwise the first failing rank's code.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback

from trainplane.jobs.entrypoints import command_of, entrypoint_of, function_of
from trainplane.jobs.spec import FinetuneSpec, TrainSpec, load_spec
from trainplane.net import free_port
from trainplane.runtime import env as tp_env
from trainplane.runtime.gang import GangShape
from trainplane.runtime.preemption import (
    CHECKPOINT_REASON,
    EXIT_PREEMPTED,
    Preempted,
    checkpointed_to_stop,
    stopped_message,
)
from trainplane.runtime.processes import EXIT_ORPHANED, OrphanWatch
from trainplane.runtime.ray_train import failure_cause
from trainplane.runtime.resume_points import choose_resume_point
from trainplane.runtime.script_ranks import RankPlan, run_rank
from trainplane.runtime.secrets import SecretsUnavailable, secret_env
from trainplane.runtime.start_events import mark, mark_process_start
from trainplane.storage.backends import StorageError, join, open_storage
from trainplane.storage.checkpoints import folder_step

# The driver's own failures, distinct from a user command's exit code.
EXIT_BAD_SPEC = 64
EXIT_UNSUPPORTED = 65
EXIT_TRAINING_FAILED = 1
LOG_GRACE_SECONDS = 1.0


def main() -> int:
    mark_process_start("driver started")
    mark("driver imported")
    watch = OrphanWatch(_supervisor_pid() or os.getppid())
    if watch.orphaned():
        # The attempt was stopped before we got here (its supervisor is gone):
        # start nothing that no one would ever stop.
        print("trainplane: the job's supervisor is gone before the start; stopping", flush=True)
        return EXIT_ORPHANED
    watch.start()
    try:
        # A spec the server accepted parses again; SpecError names the field if not.
        spec = load_spec(json.loads(os.environ[tp_env.SPEC]))
        accelerator = os.environ.get(tp_env.ACCELERATOR, "cpu")
    except (KeyError, ValueError) as exc:
        print(f"trainplane: the attempt carries no readable spec ({exc})", flush=True)
        return EXIT_BAD_SPEC
    try:
        # Before anything starts: a secret deleted since the job was
        # submitted fails the attempt here, naming it. A gang's workers fetch
        # their own copy (runtime.secrets): the values never go through Ray.
        secrets = secret_env(spec)
    except SecretsUnavailable as exc:
        print(f"{tp_env.TRAINING_FAILED}{exc}", flush=True)
        return EXIT_TRAINING_FAILED
    resources = spec.resources
    on_gpu = accelerator.lower() != "cpu"
    if function_of(spec):
        return run_function(spec, on_gpu=on_gpu, secrets=secrets)
    argv = command_of(entrypoint_of(spec))
    if argv is None:
        print("trainplane: the spec has no entrypoint this runtime can run", flush=True)
        return EXIT_UNSUPPORTED
    shape = GangShape(
        workers=resources.gpus,
        workers_per_node=resources.gpus_per_node,
        # On a cpu cluster a "GPU" is a worker slot of one CPU.
        cpus_per_worker=resources.cpus_per_worker if on_gpu else 1,
        gpu=on_gpu,
    )
    backend = "nccl" if on_gpu else "gloo"
    common_env = {
        tp_env.DIST_BACKEND: backend,
        tp_env.DEVICE: "cuda" if on_gpu else "cpu",
    }
    if not on_gpu:
        common_env["OMP_NUM_THREADS"] = str(max(1, int(resources.cpus_per_worker)))
    try:
        plan = script_plan(spec)
    except StorageError as exc:
        print(f"{tp_env.TRAINING_FAILED}{exc}", flush=True)
        return EXIT_TRAINING_FAILED
    if shape.workers == 1:
        # The driver was given the one worker's resources: run it right here,
        # without starting Ray in this process.
        print(f"trainplane: starting 1 {'GPU' if on_gpu else 'CPU'} worker ({backend})", flush=True)
        code = run_inline(argv, common_env, secrets, plan)
        print(f"trainplane: worker finished with exit code {code}", flush=True)
        return _script_outcome(code)

    import ray

    from trainplane.runtime.start_timeout import start_timeout
    from trainplane.runtime.workers import PlacementTimeout, WorkerGroup

    ray.init(log_to_driver=True, logging_level=logging.WARNING)
    print(
        f"trainplane: starting {shape.workers} {'GPU' if on_gpu else 'CPU'} workers "
        f"({backend}) on {shape.nodes} node(s)",
        flush=True,
    )
    group = WorkerGroup(shape, ready_timeout=start_timeout())
    watch.add_cleanup(group.stop)
    try:
        group.start()
        code = group.run(argv, common_env, plan)
    except PlacementTimeout as exc:
        print(f"{tp_env.TRAINING_FAILED}{exc}", flush=True)
        return EXIT_TRAINING_FAILED
    finally:
        group.stop()
    # Worker output reaches this log through Ray's log monitor, a moment behind.
    time.sleep(LOG_GRACE_SECONDS)
    print(f"trainplane: workers finished with exit code {code}", flush=True)
    return _script_outcome(code)


def script_plan(spec: TrainSpec | FinetuneSpec) -> RankPlan:
    """What every rank of a script's attempt shares, decided here once: the
    checkpoint it resumes from (checkpoint.resume; StorageError when the one
    it names is not complete)."""
    root = os.environ.get(tp_env.CHECKPOINT_URI)
    storage = open_storage(root) if root else None
    chosen = choose_resume_point(spec.checkpoint, storage)
    resume = join(*chosen) if chosen else None
    if chosen:
        step = folder_step(chosen[1])
        print(f"trainplane: resuming from checkpoint step {step} ({resume})", flush=True)
    return RankPlan(
        # By hand, without an attempt: a name of this run's own.
        attempt_id=os.environ.get(tp_env.ATTEMPT_ID) or f"run-{os.getpid()}",
        nodes=1,
        resume=resume,
        register_model=spec.register_model is not None,
    )


def _script_outcome(code: int) -> int:
    """A script that saved because it was asked to stop, then exited 0,
    was preempted: its attempt ends so, and the next one resumes."""
    if code != 0:
        return code
    stopped = _checkpointed_to_stop()
    return _stopped_for_preemption(stopped) if stopped else code


def _checkpointed_to_stop() -> str | None:
    """Why this attempt's latest checkpoint was saved, when it was asked to stop."""
    return checkpointed_to_stop(
        os.environ.get(tp_env.CHECKPOINT_URI), os.environ.get(tp_env.ATTEMPT_ID)
    )


def _supervisor_pid() -> int | None:
    """Our parent's pid as the entrypoint saw it; None when run by hand."""
    try:
        return int(os.environ[tp_env.SUPERVISOR_PID])
    except (KeyError, ValueError):
        return None


def precision_described(requested: str | None, *, on_gpu: bool) -> str:
    """The precision for the attempt's log. The driver may run where no GPU
    is, so an unset precision on a GPU cluster is told as the rule the ranks
    apply (jobs.precision), not as a guess."""
    if requested is not None:
        return requested
    return "unset: bf16 where the GPU computes it natively, else fp32" if on_gpu else "fp32"


def run_function(spec: TrainSpec | FinetuneSpec, *, on_gpu: bool, secrets: dict[str, str]) -> int:
    """A train function: on one worker right here, on a gang through Ray Train."""
    workers = spec.resources.gpus
    if workers == 1:
        # The function runs in this very process. (A gang's driver keeps them
        # out of its environment, which Ray Train would hand to its workers.)
        os.environ.update(secrets)
    os.environ[tp_env.DEVICE] = "cuda" if on_gpu else "cpu"
    if not on_gpu:
        threads = max(1, int(spec.resources.cpus_per_worker))
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    restarts_left = int(os.environ.get(tp_env.RESTARTS_LEFT, "0"))
    print(
        f"trainplane: running {function_of(spec)} on {workers} "
        f"{'GPU' if on_gpu else 'CPU'} worker(s), strategy {spec.strategy.type}, "
        f"precision {precision_described(spec.precision, on_gpu=on_gpu)}",
        flush=True,
    )
    try:
        if workers == 1:
            from trainplane.runtime.local import run_local

            run_local(spec)
        else:
            from trainplane.runtime.ray_train import run_with_ray_train

            run_with_ray_train(spec, on_gpu=on_gpu, restarts_left=restarts_left)
    except Preempted as stop:
        return _stopped_for_preemption(stop.reason)
    except Exception as exc:
        traceback.print_exc()
        if workers > 1:
            # Ray Train's own output about the failure trails in a moment
            # later; the job's reason is taken from this line, so it goes last.
            time.sleep(LOG_GRACE_SECONDS)
        print(f"{tp_env.TRAINING_FAILED}{failure_cause(exc)}", flush=True)
        return EXIT_TRAINING_FAILED
    stopped = _checkpointed_to_stop() if workers > 1 else None
    if stopped:
        return _stopped_for_preemption(stopped)
    print("trainplane: training finished", flush=True)
    return 0


def _stopped_for_preemption(reason: str = CHECKPOINT_REASON) -> int:
    """Preempted or pruned, the exit is the same: the scheduler knows which."""
    print(stopped_message(reason), flush=True)
    return EXIT_PREEMPTED


def run_inline(
    argv: list[str], common_env: dict[str, str], secrets: dict[str, str], plan: RankPlan
) -> int:
    env = {
        **os.environ,
        **common_env,
        **secrets,
        **tp_env.torchrun_env(
            rank=0,
            local_rank=0,
            world_size=1,
            local_world_size=1,
            group_rank=0,
            master_addr="127.0.0.1",
            master_port=free_port(),
        ),
    }
    return run_rank(argv, env, rank=0, plan=plan)


if __name__ == "__main__":
    sys.exit(main())
