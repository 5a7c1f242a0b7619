"""The web dashboard: server-rendered pages at ``/``, ``/jobs/{id}``,
``/clusters``, ``/usage``, ``/compare`` and ``/submit``, and the small
scripts that keep them live.

It owns no data. Every page is rendered from the public HTTP API, called
in-process with the visitor's own token (:mod:`trainplane.dashboard.api`), and
the scripts in the browser call the same API directly: the dashboard never
knows more than any client with that token could.
"""
