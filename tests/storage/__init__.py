"""Tests of storage/: containment of job-written paths and keys."""
