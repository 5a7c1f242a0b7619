"""The ``trainplane`` command. An HTTP client of the API (``TRAINPLANE_URL``),
built on the SDK's session, spec files and credentials, except for the verbs
that start servers or migrate the database (they import the server inside the
verb: see tests/test_layers.py)."""
