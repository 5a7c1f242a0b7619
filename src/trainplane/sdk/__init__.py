"""The Python SDK: ``Client`` and ``AsyncClient`` (HTTP clients of the API,
importing no server code), their models and errors, and ``@distributed``.
Import them from ``trainplane`` itself (``trainplane.Client``)."""
