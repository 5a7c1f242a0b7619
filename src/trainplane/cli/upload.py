"""What ``submit`` and ``plan`` send besides the spec: the files it names on
this machine, for a server that cannot read them (any server but ``trainplane
up`` here). The working folder goes as a code bundle the job then names in
``entrypoint.code`` (its command runs in the unpacked bundle, so paths
relative to the working folder still work); a fine-tune's base model and
datasets go to the project's storage and the spec names where they landed.
Both are skipped when the server has the same bytes already.

``--upload`` sends them to any server; ``--no-upload`` sends the paths as
they are, for a server whose ``TRAINPLANE_SERVER_PATHS`` holds them. The
decision and the requests are the SDK's (``sdk.uploads``); this drives them
over the CLI's session and prints what was sent."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from trainplane.cli.common import say
from trainplane.sdk.local_files import LocalFilesError
from trainplane.sdk.sessions import Session
from trainplane.sdk.uploads import prepare, run_steps

UploadOption = Annotated[
    bool | None,
    typer.Option(
        "--upload/--no-upload",
        help="Send the files the spec names on this machine (entrypoint.working_dir as a "
        "code bundle; a fine-tune's base_model and dataset to the project's storage). "
        "Default: unless the server is `trainplane up` on this machine. --no-upload sends "
        "the paths as they are, for a server whose TRAINPLANE_SERVER_PATHS holds them.",
        show_default=False,
    ),
]


class UploadError(Exception):
    """The spec's local files cannot be sent: ``errors`` names each field."""

    def __init__(self, problems: list[tuple[str, str]], *, deciding: bool) -> None:
        self.errors = [
            {"field": field, "message": message, "type": "local_files"}
            for field, message in problems
        ]
        lines = [f"  {field}: {message}" for field, message in problems]
        if deciding and any(message.endswith("does not exist") for _, message in problems):
            # A path of the server's, not of this machine: the server may hold it.
            lines.append(
                "(--no-upload sends the paths as they are, for a server whose "
                "TRAINPLANE_SERVER_PATHS holds them)"
            )
        super().__init__("\n".join(["the spec's files on this machine cannot be sent:", *lines]))


def send_local_files(client: Session, spec: dict[str, Any], upload: bool | None) -> dict[str, Any]:
    """``spec`` as the server should get it: the files it names on this
    machine uploaded where needed. Raises UploadError before anything is
    uploaded when a file is missing or wrong, TrainplaneError when the server
    refuses."""
    try:
        return run_steps(prepare(spec, url=client.url, upload=upload, note=say), client.run)
    except LocalFilesError as exc:
        raise UploadError(exc.problems, deciding=upload is None) from None
