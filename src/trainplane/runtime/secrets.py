"""The attempt's project secrets (``entrypoint.secrets``), asked of the
control plane with the attempt's token when a rank process is about to start.

The values never travel through Ray: not in the Ray job's runtime_env (which
Ray's job list and dashboard show), task arguments or object store. Whoever
starts a rank process (the driver for a one-worker job, each Ray actor or Ray
Train worker of a gang) fetches them itself and puts them in that process's
environment only. Nothing here prints a value.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import httpx

from trainplane.jobs.entrypoints import wanted_secrets
from trainplane.jobs.spec import FinetuneSpec, TrainSpec
from trainplane.runtime import env as tp_env

TRIES = 5
FIRST_WAIT_SECONDS = 1.0
TIMEOUT_SECONDS = 10.0


class SecretsUnavailable(RuntimeError):
    """The attempt cannot have its secrets; the message says why (and names
    a secret that was deleted)."""


def secret_env(
    spec: TrainSpec | FinetuneSpec, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment variables of the spec's ``entrypoint.secrets`` with
    their values; empty (and no request) when it names none."""
    wanted = wanted_secrets(spec)
    if not wanted:
        return {}
    environ = os.environ if environ is None else environ
    url = environ.get(tp_env.CONTROL_PLANE_URL)
    job_id, attempt_id = environ.get(tp_env.JOB_ID), environ.get(tp_env.ATTEMPT_ID)
    token = environ.get(tp_env.ATTEMPT_TOKEN)
    if not (url and job_id and attempt_id and token):
        raise SecretsUnavailable(
            "entrypoint.secrets are fetched from the control plane, and this attempt was "
            "launched without its address (the server's TRAINPLANE_ADVERTISE_URL is unset)"
        )
    endpoint = f"{url.rstrip('/')}/v1/jobs/{job_id}/attempts/{attempt_id}/secrets"
    answer = _get(endpoint, token)
    if answer.status_code != 200:
        raise SecretsUnavailable(
            f"the control plane refused this attempt's secrets ({answer.status_code}): "
            f"{_detail(answer)}"
        )
    env = (answer.json() or {}).get("env") or {}
    missing = sorted(set(wanted) - set(env))
    if missing:
        raise SecretsUnavailable(f"the control plane sent no value for {', '.join(missing)}")
    return {name: str(env[name]) for name in wanted}


def _get(endpoint: str, token: str) -> httpx.Response:
    """The answer, after retrying what may pass (no answer, 429, 5xx) a few
    times with a doubling wait."""
    wait = FIRST_WAIT_SECONDS
    problem = ""
    for attempt in range(TRIES):
        try:
            answer = httpx.get(
                endpoint, headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT_SECONDS
            )
        except httpx.HTTPError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        else:
            if answer.status_code != 429 and answer.status_code < 500:
                return answer
            problem = f"HTTP {answer.status_code}"
        if attempt + 1 < TRIES:
            time.sleep(wait)
            wait *= 2
    raise SecretsUnavailable(
        f"the control plane did not hand out this attempt's secrets after {TRIES} tries ({problem})"
    )


def _detail(answer: httpx.Response) -> str:
    try:
        return str(answer.json().get("detail") or "")[:500]
    except (ValueError, AttributeError):
        return answer.text[:500]
