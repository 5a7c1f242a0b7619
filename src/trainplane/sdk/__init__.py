"""The Python SDK: ``Client`` and ``AsyncClient`` (HTTP clients of the API,
importing no server code), their models and errors, and ``@distributed``;
under them the one HTTP session (``sessions``) that the CLI and the dashboard
use too.
Import them from ``trainplane`` itself (``trainplane.Client``)."""
