"""trainplane: a self-hostable service that runs multi-GPU training and fine-tune jobs."""

__version__ = "0.1.0"

# name -> the module that defines it. Imported on first use: `import trainplane`
# stays cheap, and the CLI and the control plane never load torch.
_LAZY = {
    "TrainContext": "trainplane.runtime.context",
    "Client": "trainplane.sdk.client",
    "AsyncClient": "trainplane.sdk.aio",
    "distributed": "trainplane.sdk.distributed",
    **{
        name: "trainplane.sdk.call_errors"
        for name in (
            "ShippingError",
            "Unpicklable",
            "ModuleNotShippable",
            "CallTooLarge",
            "RemoteFunctionError",
        )
    },
    **{
        name: "trainplane.sdk.errors"
        for name in (
            "TrainplaneError",
            "ConnectionFailed",
            "Unauthorized",
            "Forbidden",
            "NotFound",
            "Conflict",
            "PayloadTooLarge",
            "InvalidRequest",
            "RateLimited",
            "ServerError",
            "Unavailable",
            "JobFailed",
            "WaitTimeout",
        )
    },
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'trainplane' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
