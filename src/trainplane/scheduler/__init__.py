"""The scheduler: loops that place queued jobs, launch and watch their attempts
on Ray clusters, and end, retry or stop them.

Each loop iteration does its database work through ``trainplane.services`` in
short transactions and its cluster calls (``trainplane.backends``) outside
them. Several schedulers may run against one PostgreSQL: placement takes an
advisory lock, attempts are claimed with leases.
"""
