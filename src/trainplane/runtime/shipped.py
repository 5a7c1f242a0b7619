"""The train function of jobs made by ``@trainplane.distributed``: load the
call shipped in the job's code bundle and make it with this rank's context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainplane.runtime.context import TrainContext
from trainplane.shipped_calls import PAYLOAD_PATH, unpack_call


def call(ctx: TrainContext) -> Any:
    payload = Path(ctx.args.get("payload", PAYLOAD_PATH))
    shipped = unpack_call(payload.read_bytes())
    # The entrypoint's args describe the shipping; the function gets its own,
    # and by name any other the spec sets (a sweep's trial: entrypoint.args.lr).
    swept = {k: v for k, v in ctx.args.items() if k not in ("payload", "function")}
    ctx.args = {}
    return shipped.function(ctx, *shipped.args, **{**shipped.kwargs, **swept})
