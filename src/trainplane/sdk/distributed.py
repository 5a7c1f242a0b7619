"""``@trainplane.distributed``: calling a decorated train function runs it on
the cluster as an ordinary job, on every rank, and returns what rank 0's
function returned (or raises with the remote traceback and the job id).

::

    @trainplane.distributed(gpus=4, strategy="fsdp")
    def train(ctx: trainplane.TrainContext, steps: int) -> float:
        ...

    final_loss = train(steps=100)        # waits, showing progress
    call = train.submit(steps=100)       # or: returns at once
    call.job_id, call.result()
    search = train.sweep(steps=100, parameters={"lr": [1e-3, 1e-2]}, objective="loss")
    search.result().best_trial           # a sweep whose trials are calls

The function's first argument is the rank's TrainContext; the call's own
arguments follow it. The options are the job spec's fields (DESIGN.md);
``spec`` takes any other field as a nested dict. The job is visible in the
API and the dashboard, tracked in MLflow, cancellable (interrupting a
waiting call cancels it), and restarted from its checkpoints by its retry
policy like any other.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from pydantic import ValidationError

from trainplane.dicts import merged
from trainplane.sdk.call_errors import RemoteFunctionError, ShippingError
from trainplane.sdk.errors import ConnectionFailed, JobFailed, NotFound, TrainplaneError
from trainplane.sdk.models import Job
from trainplane.sdk.progress import ProgressLine
from trainplane.sdk.shipping import MAX_PAYLOAD_BYTES, PackedCall, pack
from trainplane.shipped_calls import PAYLOAD_PATH, SHIPPED_FUNCTION

if TYPE_CHECKING:
    from trainplane.sdk.distributed_sweeps import RemoteSweep

P = ParamSpec("P")
R = TypeVar("R")

_PLACEHOLDER_DIGEST = "sha256:" + "0" * 64
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
# The spec's sections each option fills in.
_RESOURCE_OPTIONS = ("gpus", "gpus_per_node", "gpu_type", "cpus_per_worker")
_TOP_LEVEL_OPTIONS = (
    "precision",
    "model",
    "checkpoint",
    "retries",
    "priority",
    "max_runtime",
    "stuck_after",
    "tracking",
    "register_model",
    "optimization",
)


class InvalidOptions(ShippingError):
    """The decorator's options do not make a valid job spec; the message names the field."""


class RemoteCall(Generic[R]):
    """A submitted call: its job, and its result once the job ends."""

    def __init__(self, client: Any, job: Job, name: str, *, progress: bool) -> None:
        self.client = client
        self.job = job
        self.name = name
        self.progress = progress
        self._cancelled = False

    @property
    def job_id(self) -> str:
        return self.job.id

    def __repr__(self) -> str:
        return f"<RemoteCall {self.name} job={self.job.id} {self.job.status}>"

    def wait(self, timeout: float | None = None) -> Job:
        """The job once it has ended; interrupting the wait cancels it. When
        ``timeout`` passes first, WaitTimeout is raised and the job goes on."""
        line = ProgressLine() if self.progress else None
        try:
            with self.cancelled_if_abandoned(KeyboardInterrupt):
                self.job = self.client.wait(
                    self.job.id, timeout=timeout, on_progress=line.show if line else None
                )
        finally:
            if line is not None:
                line.close()
        return self.job

    @contextlib.contextmanager
    def cancelled_if_abandoned(self, *abandoning: type[BaseException]) -> Iterator[None]:
        """Cancels the job, if it has not ended, when one of ``abandoning``
        escapes the block: nobody will be there to take its result."""
        try:
            yield
        except abandoning as exc:
            if not self.job.is_terminal and not self._cancelled:
                self._cancelled = True
                why = "interrupted" if isinstance(exc, KeyboardInterrupt) else type(exc).__name__
                # Best effort: the server being unreachable may be what went wrong.
                with contextlib.suppress(TrainplaneError):
                    self.job = self.client.cancel(self.job.id)
                    print(f"trainplane: {why}; cancelled job {self.job.id}", flush=True)
            raise

    def result(self, timeout: float | None = None) -> R:
        """What rank 0's function returned. Raises RemoteFunctionError (with
        the remote traceback) when it raised, JobFailed when the job failed
        or was cancelled otherwise."""
        job = self.wait(timeout) if not self.job.is_terminal else self.job
        try:
            outcome = self.client.result(job.id)
        except NotFound:
            outcome = None
        if outcome is not None and outcome.outcome == "raised":
            raise RemoteFunctionError(job, outcome)
        if not job.succeeded:
            raise JobFailed(job)
        if outcome is None or outcome.pickled is None:
            raise JobFailed(job) from RuntimeError(
                f"job {job.id} succeeded but recorded no return value"
            )
        import cloudpickle

        return cloudpickle.loads(outcome.pickled)


class DistributedFunction(Generic[P, R]):
    def __init__(
        self,
        function: Callable[..., R],
        options: dict[str, Any],
        *,
        client: Any = None,
        progress: bool = True,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
    ) -> None:
        if not callable(function):
            raise TypeError(f"@trainplane.distributed decorates a function, not {function!r}")
        self.function = function
        self.options = options
        self.client = client
        self.progress = progress
        self.max_payload_bytes = max_payload_bytes
        functools.update_wrapper(self, function)
        # Wrong options fail here, when the cell defining the function runs.
        self.spec_for(_PLACEHOLDER_DIGEST)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Submit, wait and return rank 0's result. Whatever ends the wait
        early (an interrupt, a signal's exception, a lost connection) also
        cancels the job, since nothing is left to take its result."""
        call = self.submit(*args, **kwargs)
        with call.cancelled_if_abandoned(BaseException):
            call.wait()
        return call.result()

    def submit(self, *args: P.args, **kwargs: P.kwargs) -> RemoteCall[R]:
        """Ship the call and queue its job; returns without waiting."""
        packed = pack(self.function, args, kwargs, max_payload_bytes=self.max_payload_bytes)
        spec = self.spec_for(packed.digest)
        shape = f"{spec['resources']['gpus']} GPU(s), {spec['strategy']['type']}"
        job = self._queue(spec, packed, packed.name, shape)
        return RemoteCall(self.client, job, packed.name, progress=self.progress)

    def sweep(
        self,
        *args: Any,
        parameters: dict[str, Any],
        objective: str | dict[str, Any],
        search: dict[str, Any] | None = None,
        early_stop: dict[str, Any] | None = None,
        register_model: dict[str, Any] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> RemoteSweep:
        """Search ``parameters`` (argument names, or spec paths such as
        ``strategy.type``) over trials that each call the function with
        ``args``/``kwargs`` and their own values; returns without waiting.
        See ``trainplane.sdk.distributed_sweeps``."""
        from trainplane.jobs.spec import job_spec_adapter
        from trainplane.sdk.distributed_sweeps import RemoteSweep, SweepOptionsError, sweep_spec

        packed = pack(self.function, args, kwargs, max_payload_bytes=self.max_payload_bytes)
        try:
            document = sweep_spec(
                self.function,
                self.spec_for(packed.digest),
                passed=kwargs,
                parameters=parameters,
                objective=objective,
                search=search,
                early_stop=early_stop,
                register_model=register_model,
                name=name,
            )
            model = job_spec_adapter.validate_python(document)
        except SweepOptionsError as exc:
            raise InvalidOptions(f"{self.function.__qualname__}.sweep: {exc}") from None
        except ValidationError as exc:
            raise InvalidOptions(_describe(self.function, exc)) from None
        spec = model.model_dump(mode="json", exclude_none=True)
        shape = f"{len(spec['parameters'])} parameter(s), {model.trial_count} trials"
        job = self._queue(spec, packed, f"a sweep of {packed.name}", shape)
        return RemoteSweep(self.client, job, packed.name, progress=self.progress)

    def _queue(self, spec: dict[str, Any], packed: PackedCall, what: str, shape: str) -> Job:
        """The call's code bundle stored (unless the project has it), its spec
        submitted, and said so (``what`` is job ... (``shape``))."""
        client = self._client()
        project = spec["project"]
        try:
            client.bundle(project, packed.digest)
        except NotFound:
            client.upload_bundle(project, packed.bundle)
        key = f"distributed-{uuid.uuid4()}"
        try:
            job = client.submit(spec, idempotency_key=key)
        except ConnectionFailed:
            job = client.submit(spec, idempotency_key=key)  # the same key: never a second job
        if self.progress:
            print(
                f"trainplane: {what} is job {job.id} in project {project} ({shape}); "
                f"{client.url}/jobs/{job.id}",
                flush=True,
            )
        return job

    def options_with(self, **changes: Any) -> DistributedFunction[P, R]:
        """The same function with some options changed (``strategy="fsdp"``)."""
        return DistributedFunction(
            self.function,
            {**self.options, **changes},
            client=self.client,
            progress=self.progress,
            max_payload_bytes=self.max_payload_bytes,
        )

    def spec_for(self, digest: str) -> dict[str, Any]:
        """The job spec a call makes, validated (InvalidOptions names the field)."""
        from trainplane.jobs.spec import job_spec_adapter

        spec = build_spec(self.function, self.options, digest)
        try:
            return job_spec_adapter.validate_python(spec).model_dump(mode="json", exclude_none=True)
        except ValidationError as exc:
            raise InvalidOptions(_describe(self.function, exc)) from None

    def _client(self) -> Any:
        if self.client is None:
            from trainplane.sdk.client import Client

            self.client = Client()
        return self.client

    def __getstate__(self) -> dict[str, Any]:
        # A function that refers to its own decorated name ships without the client.
        return {**self.__dict__, "client": None}


def distributed(
    function: Callable[..., R] | None = None,
    *,
    gpus: int = 1,
    strategy: str | dict[str, Any] = "ddp",
    project: str | None = None,
    name: str | None = None,
    env: dict[str, str] | None = None,
    pip: list[str] | None = None,
    spec: dict[str, Any] | None = None,
    client: Any = None,
    progress: bool = True,
    max_payload_bytes: int = MAX_PAYLOAD_BYTES,
    **fields: Any,
) -> Any:
    """Decorate a train function (its first argument a TrainContext) so that
    calling it runs it on the cluster. ``strategy`` is a type (``ddp``,
    ``fsdp``, ``deepspeed``, ``auto``) or the spec's strategy mapping;
    ``deepspeed={"stage": 3}`` and ``fsdp={...}`` set its options. Other
    keywords are the spec's fields: ``gpus_per_node``, ``gpu_type``,
    ``cpus_per_worker``, ``precision``, ``checkpoint``, ``retries``,
    ``priority``, ``max_runtime``, ``tracking``, ``register_model``, ...
    ``client`` defaults to ``trainplane.Client()`` (TRAINPLANE_URL,
    TRAINPLANE_TOKEN); ``project`` to TRAINPLANE_PROJECT, else ``default``."""
    options = {
        "gpus": gpus,
        "strategy": strategy,
        "project": project,
        "name": name,
        "env": env,
        "pip": pip,
        "spec": spec,
        **fields,
    }

    def decorate(target: Callable[..., R]) -> DistributedFunction[Any, R]:
        return DistributedFunction(
            target,
            options,
            client=client,
            progress=progress,
            max_payload_bytes=max_payload_bytes,
        )

    return decorate(function) if function is not None else decorate


def build_spec(
    function: Callable[..., Any], options: dict[str, Any], digest: str
) -> dict[str, Any]:
    strategy = options.get("strategy") or "ddp"
    strategy = {"type": strategy} if isinstance(strategy, str) else dict(strategy)
    for kind in ("deepspeed", "fsdp"):
        if options.get(kind) is not None:
            strategy[kind] = options[kind]
    resources = {key: options[key] for key in _RESOURCE_OPTIONS if options.get(key) is not None}
    entrypoint: dict[str, Any] = {
        "function": SHIPPED_FUNCTION,
        "args": {"payload": PAYLOAD_PATH, "function": getattr(function, "__qualname__", "")},
        "code": digest,
    }
    if options.get("env"):
        entrypoint["env"] = dict(options["env"])
    if options.get("pip"):
        entrypoint["pip"] = list(options["pip"])
    spec: dict[str, Any] = {
        "kind": "train",
        "name": options.get("name") or job_name(function),
        "project": options.get("project") or os.environ.get("TRAINPLANE_PROJECT") or "default",
        "entrypoint": entrypoint,
        "resources": resources,
        "strategy": strategy,
    }
    spec.update({key: options[key] for key in _TOP_LEVEL_OPTIONS if options.get(key) is not None})
    known = {"strategy", "project", "name", "env", "pip", "spec", "deepspeed", "fsdp"}
    unknown = set(options) - known - set(_RESOURCE_OPTIONS) - set(_TOP_LEVEL_OPTIONS)
    for key in sorted(unknown):
        spec[key] = options[key]  # the validator names what it does not know
    return merged(spec, options.get("spec") or {})


def job_name(function: Callable[..., Any]) -> str:
    name = _NAME_UNSAFE.sub("-", getattr(function, "__name__", "function")).strip("-._")
    return name[:128] or "function"


def _describe(function: Callable[..., Any], exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        location = [str(part) for part in error["loc"]]
        if location and location[0] in ("train", "sweep"):
            location = location[1:]  # the union's tag
        lines.append(f"{'.'.join(location) or 'spec'}: {error['msg']}")
    name = getattr(function, "__qualname__", "the function")
    return f"@trainplane.distributed options of {name} make no valid job spec:\n  " + "\n  ".join(
        lines
    )
