# trainplane control plane: the API server (and, later, the scheduler loops).
# Build from the checkout: docker build -f docker/control-plane.Dockerfile .
# The control plane does no training, so it carries no torch or CUDA.

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY src ./src
COPY migrations ./migrations
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
RUN useradd --system --uid 10001 --home-dir /var/lib/trainplane --create-home trainplane
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels trainplane && rm -rf /wheels
USER 10001
ENV TRAINPLANE_HOME=/var/lib/trainplane \
    PYTHONUNBUFFERED=1
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
CMD ["trainplane", "server", "--host", "0.0.0.0", "--port", "8080", "--workers", "2"]
