"""Scheduling in simulated time: replaying a cluster trace through the same
pure placement and fair-share code the scheduler runs."""
