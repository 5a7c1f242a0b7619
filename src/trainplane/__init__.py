"""trainplane: a self-hostable service that runs multi-GPU training and fine-tune jobs."""

__version__ = "0.1.0"
