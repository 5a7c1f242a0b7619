"""How long an attempt waits for its cluster to place its workers.

A cluster that scales from zero (KubeRay worker groups start at 0 replicas)
needs minutes to add a GPU node: a VM, the image pull, the driver. So the wait
is the registered cluster's: its ``start_timeout_seconds``, else a default by
whether it says it autoscales. The control plane hands it to the attempt as
Ray Train's own knob, which a command's gang reads too, so both kinds of gang
wait alike.
"""

from __future__ import annotations

import os

START_TIMEOUT_ENV = "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"
# A GPU node brought up from zero: instance start, image pull, driver load.
AUTOSCALING_START_TIMEOUT = 900.0
# A fixed cluster: room for another job's workers to be torn down and for
# actors to start on a loaded head, still short enough that slots held by
# something trainplane did not start fail the attempt within minutes.
FIXED_START_TIMEOUT = 300.0


def cluster_start_timeout(*, autoscaling: bool, start_timeout_seconds: int | None) -> float:
    """The wait a registered cluster's attempts get."""
    if start_timeout_seconds is not None:
        return float(start_timeout_seconds)
    return AUTOSCALING_START_TIMEOUT if autoscaling else FIXED_START_TIMEOUT


def start_timeout() -> float:
    """The attempt's wait, as the control plane (or the job's own env) set it."""
    try:
        return float(os.environ.get(START_TIMEOUT_ENV, FIXED_START_TIMEOUT))
    except ValueError:
        return FIXED_START_TIMEOUT


def placement_timeout_message(workers: int, waited: float) -> str:
    """Why an attempt whose workers were never placed failed. The scheduler
    counted those slots as free, so whatever holds them is not trainplane's,
    or the cluster could not add the nodes in time."""
    return (
        f"the cluster did not place the {workers} workers within {waited:.0f}s "
        "(something trainplane did not start may be holding their slots, or the cluster "
        "could not add nodes in time; the cluster's start_timeout_seconds, or "
        f"{START_TIMEOUT_ENV} in entrypoint.env, sets the wait)"
    )
