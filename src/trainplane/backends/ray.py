"""A registered Ray cluster, seen through the Ray Jobs API.

Each attempt is one Ray job whose ``submission_id`` is the attempt id, so a
launch repeated after a crash finds the Ray job that already exists instead of
starting a second one.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from trainplane.jobs.attempts import RayJobStatus

log = logging.getLogger(__name__)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
CONNECT_TIMEOUT = 5.0
# Long enough for a working_dir upload; a stuck call still ends.
READ_TIMEOUT = 120.0


class ClusterUnreachable(Exception):
    """The cluster did not answer; the caller decides when that means lost."""


class LaunchRejected(Exception):
    """The cluster refused the job for a reason retrying will not change."""


@dataclass(frozen=True)
class RayJobState:
    status: RayJobStatus
    message: str
    exit_code: int | None

    @property
    def ended(self) -> bool:
        return self.status.ended


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


class RayCluster:
    """Thin, thread-safe wrapper over ``JobSubmissionClient`` for one address."""

    def __init__(
        self,
        address: str,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        self.address = address.rstrip("/")
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._client: Any = None
        self._lock = threading.Lock()

    def _jobs(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._connect()
            return self._client

    def _connect(self) -> Any:
        # Ray's SDK sets no timeout on its HTTP calls: a host that accepts and
        # never answers would hang a scheduler thread for good. Check that the
        # dashboard answers, then give every call of the client a timeout.
        try:
            httpx.get(
                f"{self.address}/api/version", timeout=self.connect_timeout
            ).raise_for_status()
        except httpx.HTTPError as exc:
            raise ClusterUnreachable(f"{self.address}: {_short(exc)}") from None
        from ray.job_submission import JobSubmissionClient

        try:
            client = JobSubmissionClient(self.address)
        except Exception as exc:  # connection refused, bad versions
            raise ClusterUnreachable(f"{self.address}: {_short(exc)}") from None
        request = client._do_request

        def request_with_timeout(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", (self.connect_timeout, self.read_timeout))
            return request(*args, **kwargs)

        client._do_request = request_with_timeout
        return client

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        client = self._jobs()
        try:
            return getattr(client, method)(*args, **kwargs)
        except (RuntimeError, ValueError, TypeError):
            raise  # answers from the cluster, or a request it cannot take: see callers
        except Exception as exc:  # requests' connection errors and the like
            with self._lock:
                self._client = None  # reconnect next time
            raise ClusterUnreachable(f"{self.address}: {_short(exc)}") from None

    def submit(
        self,
        submission_id: str,
        *,
        entrypoint: str,
        runtime_env: dict[str, Any],
        entrypoint_resources: dict[str, float],
        metadata: dict[str, str],
    ) -> bool:
        """Start the attempt's Ray job. False if it was already submitted."""
        try:
            self._call(
                "submit_job",
                entrypoint=entrypoint,
                submission_id=submission_id,
                runtime_env=runtime_env,
                metadata=metadata,
                entrypoint_num_cpus=entrypoint_resources.get("CPU", 0),
                entrypoint_num_gpus=entrypoint_resources.get("GPU", 0),
            )
            return True
        except RuntimeError as exc:
            text = str(exc)
            if "already exists" in text:
                return False
            if _client_error(text):
                raise LaunchRejected(_short(exc)) from None
            # 5xx such as "No available agent to submit job, please try again
            # later" while a head is starting: try again on the next look.
            raise ClusterUnreachable(_short(exc)) from None
        except (ValueError, TypeError) as exc:  # e.g. a runtime_env Ray cannot package
            raise LaunchRejected(_short(exc)) from None

    def state(self, submission_id: str) -> RayJobState | None:
        """The Ray job's state, or None if the cluster has no such job."""
        try:
            info = self._call("get_job_info", submission_id)
        except RuntimeError as exc:
            if "does not exist" in str(exc):
                return None
            raise ClusterUnreachable(_short(exc)) from None
        return RayJobState(
            status=RayJobStatus(
                str(info.status.value if hasattr(info.status, "value") else info.status)
            ),
            message=info.message or "",
            exit_code=info.driver_exit_code,
        )

    def stop(self, submission_id: str) -> None:
        """Ask Ray to stop the job; a job that does not exist is already stopped."""
        try:
            self._call("stop_job", submission_id)
        except RuntimeError as exc:
            if "does not exist" not in str(exc):
                raise ClusterUnreachable(_short(exc)) from None

    def logs(self, submission_id: str) -> str | None:
        try:
            return strip_ansi(self._call("get_job_logs", submission_id))
        except RuntimeError as exc:
            if "does not exist" in str(exc):
                return None
            raise ClusterUnreachable(_short(exc)) from None

    async def follow_logs(self, submission_id: str) -> AsyncIterator[str]:
        """Log text as it is written, until the Ray job ends."""
        client = self._jobs()
        async for chunk in client.tail_job_logs(submission_id):
            yield strip_ansi(chunk)


_STATUS = re.compile(r"status code (\d{3})")


def _client_error(text: str) -> bool:
    """A 4xx answer: the request itself is wrong, and repeating it will not help."""
    match = _STATUS.search(text)
    return bool(match) and 400 <= int(match.group(1)) < 500


def _short(exc: BaseException, limit: int = 500) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


PROBE_TIMEOUT = 3.0
_probe_client: httpx.Client | None = None
_probe_client_lock = threading.Lock()


def _prober() -> httpx.Client:
    """One client for every probe, made on first use: ``httpx.get`` would build
    a client, and with it an SSL context from the CA bundle, at every probe
    of every cluster, a visible share of a waiting server's CPU."""
    global _probe_client
    with _probe_client_lock:
        if _probe_client is None:
            _probe_client = httpx.Client()
        return _probe_client


def probe(address: str, timeout: float = PROBE_TIMEOUT) -> tuple[bool, str]:
    """Whether a Ray dashboard answers at ``address``, and what to show about it
    (its Ray version, or why it is not ready). A health check: never raises."""
    address = address.rstrip("/")
    try:
        response = _prober().get(f"{address}/api/version", timeout=timeout)
    except httpx.HTTPError as exc:
        return False, f"{type(exc).__name__}: {exc}"[:500]
    if response.status_code != 200:
        return False, f"HTTP {response.status_code} from {address}/api/version"
    try:
        version = response.json().get("ray_version", "?")
    except ValueError:
        return False, f"{address} does not look like a Ray dashboard"
    return True, f"Ray {version}"


class RayClusters:
    """One RayCluster per address, shared by the scheduler's threads."""

    def __init__(self) -> None:
        self._clusters: dict[str, RayCluster] = {}
        self._lock = threading.Lock()

    def get(self, address: str) -> RayCluster:
        with self._lock:
            if address not in self._clusters:
                self._clusters[address] = RayCluster(address)
            return self._clusters[address]
