"""Helpers for trainplane's own tests and benchmarks: a throwaway PostgreSQL
server and a real ``trainplane server`` process on 127.0.0.1. Not used by the
product at run time."""
