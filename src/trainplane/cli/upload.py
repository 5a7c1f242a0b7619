"""``submit --upload``: the spec's working folder goes to the server as a code
bundle, for a server or cluster that cannot see this machine's files (a
shared trainplane, a CI runner). The job then names the bundle's digest in
``entrypoint.code`` instead of a path; its command runs in the unpacked
bundle, so paths relative to the working folder still work."""

from __future__ import annotations

from typing import Any

from trainplane.cli.client import ApiClient
from trainplane.cli.common import say
from trainplane.code_bundles import BundleError, bundle_of_spec, spec_with_bundle


class UploadError(Exception):
    """The spec's code cannot be uploaded; the message names the field."""


def upload_working_dir(client: ApiClient, spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with its ``entrypoint.working_dir`` (already absolute)
    uploaded and replaced by ``entrypoint.code``."""
    try:
        folder, bundle = bundle_of_spec(spec)
    except BundleError as exc:
        raise UploadError(f"--upload: {exc}") from None
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
    return spec_with_bundle(spec, answer["digest"])
