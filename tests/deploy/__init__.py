"""Deployment artifacts: Dockerfiles, compose, kustomize, Grafana."""
