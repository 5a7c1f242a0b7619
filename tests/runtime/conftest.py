"""Runtime fixtures live in tests/conftest.py (moto's S3 server and the
one-rank process group are shared with the tracking tests)."""
