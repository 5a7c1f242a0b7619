"""Server-side processes the CLI starts: the API server with its scheduler,
the scheduler alone, the embedded all-in-one (``trainplane up``), and schema
migrations. The CLI imports these lazily; everything else it does is HTTP."""
