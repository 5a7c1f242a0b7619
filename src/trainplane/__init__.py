"""trainplane: a self-hostable service that runs multi-GPU training and fine-tune jobs."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # Imported on first use: the CLI and the control plane never load torch.
    if name == "TrainContext":
        from trainplane.runtime.context import TrainContext

        return TrainContext
    raise AttributeError(f"module 'trainplane' has no attribute {name!r}")
