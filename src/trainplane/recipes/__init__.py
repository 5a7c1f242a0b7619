"""Built-in train functions: what a spec of a kind other than ``train`` runs.

A recipe is an ordinary train function (it takes a TrainContext), so it gets
the strategies, checkpoints, resume, progress and model export of every job.
Which kind runs which recipe is declared in ``trainplane.jobs.entrypoints``.
"""
