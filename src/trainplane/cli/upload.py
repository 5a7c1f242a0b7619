"""``submit --upload``: the spec's working folder goes to the server as a code
bundle, for a server or cluster that cannot see this machine's files (a
shared trainplane, a CI runner). The job then names the bundle's digest in
``entrypoint.code`` instead of a path; its command runs in the unpacked
bundle, so paths relative to the working folder still work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainplane.cli.client import ApiClient
from trainplane.cli.common import say
from trainplane.code_bundles import BundleError, bundle_of_folder


class UploadError(Exception):
    """The spec's code cannot be uploaded; the message names the field."""


def upload_working_dir(client: ApiClient, spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with its ``entrypoint.working_dir`` (already absolute)
    uploaded and replaced by ``entrypoint.code``."""
    entrypoint = spec.get("entrypoint")
    if not isinstance(entrypoint, dict):
        raise UploadError("--upload: the spec has no entrypoint whose code to upload")
    if entrypoint.get("code"):
        raise UploadError("--upload: entrypoint.code already names an uploaded bundle")
    folder = Path(str(entrypoint.get("working_dir") or "."))
    if not folder.is_dir():
        raise UploadError(f"--upload: entrypoint.working_dir {folder} is not a folder")
    try:
        bundle = bundle_of_folder(folder)
    except BundleError as exc:
        raise UploadError(f"--upload: entrypoint.working_dir: {exc}") from None
    project = spec.get("project") or "default"
    answer = client.request(
        "POST",
        f"/v1/projects/{project}/bundles",
        content=bundle,
        headers={"Content-Type": "application/zip"},
    )
    say(
        f"uploaded {folder} ({answer['files']} files, {answer['size_bytes'] >> 10} KiB zipped) "
        f"as {answer['digest']}"
    )
    code = {key: value for key, value in entrypoint.items() if key != "working_dir"}
    return {**spec, "entrypoint": {**code, "code": answer["digest"]}}
