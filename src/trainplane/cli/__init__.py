"""The ``trainplane`` command. An HTTP client of the API (``TRAINPLANE_URL``),
except for the verbs that start servers or migrate the database."""
