# syntax=docker/dockerfile:1.7
# trainplane control plane: the API server and the scheduler loops, one process
# per container (scale with replicas). It does no training, so it carries no
# torch and no CUDA; Ray is here only for the Ray Jobs client the scheduler
# talks to clusters with. Build from the checkout:
#   docker build -f docker/control-plane.Dockerfile -t trainplane/control-plane:0.1.0 .

FROM python:3.11.13-slim-bookworm AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# As an environment variable, unlike --constraint, the pins also reach the
# isolated environment pip builds trainplane's wheel in (setuptools).
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_CONSTRAINT=/tmp/constraints.txt
# The version the worker image runs: the Jobs client and the clusters agree.
ARG RAY_VERSION=2.60.0
COPY docker/constraints.txt /tmp/constraints.txt
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY src ./src
COPY migrations ./migrations
# The `server` extra (the Ray Jobs client, Optuna for sweeps), with Ray pinned
# here as well: hadolint wants every pip argument pinned. The last step fails
# the build if anything pulled torch in.
RUN pip install --no-cache-dir "trainplane[server] @ file:///src" "ray[default]==${RAY_VERSION}" \
    && python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)"

FROM python:3.11.13-slim-bookworm
# uid/gid 1000, like the Ray nodes, so a volume shared with them (compose's
# checkpoint volume) is writable by both without an extra chown step.
RUN groupadd --gid 1000 trainplane \
    && useradd --uid 1000 --gid 1000 --home-dir /var/lib/trainplane --create-home \
       --shell /usr/sbin/nologin trainplane \
    && install -d -o 1000 -g 1000 /data/checkpoints
COPY --from=build /opt/venv /opt/venv
# The examples, so a first job can be submitted from inside the deployment,
# where its working_dir exists (see docs/production.md).
COPY examples /opt/trainplane/examples
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TRAINPLANE_HOME=/var/lib/trainplane
USER 1000:1000
WORKDIR /var/lib/trainplane
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
CMD ["trainplane", "server", "--host", "0.0.0.0", "--port", "8080", "--workers", "1"]
