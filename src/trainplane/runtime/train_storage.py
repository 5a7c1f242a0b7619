"""Where Ray Train keeps its run state for an attempt: beside the job's
checkpoints (``<storage>/<project>/<job>/ray-train``), so that on a cluster of
many nodes it lives on storage they all reach. On S3 it goes through pyarrow's
S3 filesystem, configured from the same variables as boto3 (an endpoint
override for S3-compatible stores, the region, credentials from the
environment or the instance)."""

from __future__ import annotations

import os
import posixpath
from typing import Any
from urllib.parse import urlparse

RUN_STATE_FOLDER = "ray-train"
S3_RETRY_ATTEMPTS = 10


def ray_train_storage(checkpoint_dir: str) -> tuple[str, Any | None]:
    """(storage_path, storage_filesystem) for Ray Train's RunConfig, from the
    attempt's checkpoint folder (``<job root>/checkpoints``)."""
    if checkpoint_dir.startswith("s3://"):
        parsed = urlparse(checkpoint_dir)
        job_root = posixpath.dirname(parsed.path.rstrip("/"))
        path = f"{parsed.netloc}{job_root}/{RUN_STATE_FOLDER}"
        return path, s3_filesystem()
    job_root = os.path.dirname(checkpoint_dir.rstrip("/"))
    return os.path.join(job_root, RUN_STATE_FOLDER), None


def s3_filesystem() -> Any:
    from pyarrow import fs

    options: dict[str, Any] = {
        "retry_strategy": fs.AwsStandardS3RetryStrategy(max_attempts=S3_RETRY_ATTEMPTS)
    }
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        parsed = urlparse(endpoint)
        options["endpoint_override"] = parsed.netloc or parsed.path
        options["scheme"] = parsed.scheme or "https"
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        options["region"] = region
    return fs.S3FileSystem(**options)
