"""What runs on the Ray cluster: the job driver and its workers.

This package is imported inside Ray jobs, in the worker image. It imports
nothing from the control plane (api, services, db, scheduler) and talks to it
only over HTTP.
"""
