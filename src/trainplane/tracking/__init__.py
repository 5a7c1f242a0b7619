"""Experiment tracking in MLflow: every job is a run, a good result a registered
model. This package is the only code that imports mlflow; it knows nothing of
the database (``trainplane.services.tracking`` keeps the state, the tracking
loop in ``trainplane.scheduler.tracking`` drives it)."""
