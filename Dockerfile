# syntax=docker/dockerfile:1
# The triggerhook daemon. Build and run (docs/deployment.md; compose.yaml runs
# the whole stack):
#
#   docker build -t triggerhook .      # podman: podman build --format docker
#                                       (its OCI format drops the HEALTHCHECK)
#   scripts/image                      # either engine, reporting the image's size
#   docker run --rm -p 127.0.0.1:8080:8080 -e TRIGGERHOOK_API_TOKEN=... \
#       -e TRIGGERHOOK_DATABASE_URL=mysql://user:password@db:3306/triggerhook \
#       -e TRIGGERHOOK_AMQP_URL=amqp://user:password@broker:5672/%2F \
#       triggerhook run --init-db
#
# tests/integration/test_deploy.py runs the build stage's RUN lines, the
# entrypoint and the health check outside Docker, with $WHEELS and
# $VIRTUAL_ENV pointed at a temporary directory: write paths through them.

# The interpreter CI tests with (CPython 3.11.7 on Debian 12). Pinned to the
# patch release; move it forward together with the CI machine's Python.
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

# -- build: wheels of the project and its runtime dependencies, then the venv --
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    WHEELS=/wheels \
    VIRTUAL_ENV=/opt/triggerhook/venv
WORKDIR /src
# mysqlclient, the fast database driver, compiles against MariaDB's client
# library. Debian's current packages, not pinned: bookworm's point releases
# replace them (and their security fixes are wanted).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev pkg-config libmariadb-dev \
    && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml constraints.txt README.md LICENSE ./
COPY client ./client
COPY triggerhook ./triggerhook
# Runtime dependencies only (no dev extras), at the versions CI tests. The
# client distribution (./client, a dependency of the project) is given by
# path: it is on no index. Its build generates the gRPC messages with the
# grpcio-tools its pyproject.toml pins (pip's build isolation fetches it).
RUN pip wheel --wheel-dir "$WHEELS" -c constraints.txt ./client '.[mysqlclient]'
# The venv gets no pip or setuptools: this stage's pip installs into it, from
# the wheels above only (--no-index), so nothing unpinned can slip in; the
# project's wheel brings its dependencies, triggerhook_client-*.whl among them.
RUN python -m venv --without-pip "$VIRTUAL_ENV" \
    && pip --python "$VIRTUAL_ENV/bin/python" install --no-index --find-links "$WHEELS" \
        "$WHEELS"/triggerhook-*.whl "$WHEELS"/mysqlclient-*.whl \
    && "$VIRTUAL_ENV/bin/triggerhook" config >/dev/null

# -- runtime: the venv and the default configuration, run as an unprivileged user
FROM ${PYTHON_IMAGE} AS runtime
# OCI annotations (docker inspect, registries). Keep VERSION with pyproject.toml
# (a test checks); a release build passes REVISION=$(git rev-parse HEAD).
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="triggerhook" \
      org.opencontainers.image.description="High-precision trigger engine: MySQL-backed tasks fired as RabbitMQ events at their due time" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
# The client library mysqlclient was built against (see the build stage).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libmariadb3 \
    && rm -rf /var/lib/apt/lists/*
# The user; and no pip (nor setuptools, wheel) left in the image: the base
# brings them, the daemon needs none (its venv has none either), and whoever
# gets into the container cannot install anything with them.
RUN useradd --system --uid 10001 --user-group --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin triggerhook \
    && python -m pip uninstall --yes --quiet --root-user-action=ignore pip setuptools wheel
COPY --from=build /opt/triggerhook/venv /opt/triggerhook/venv
COPY config/triggerhook.toml /etc/triggerhook/triggerhook.toml
# Settings: this file < TRIGGERHOOK_* variables < flags. The API listens on
# every interface of the container, so the daemon refuses to start without
# TRIGGERHOOK_API_TOKEN (/healthz and /readyz stay open).
ENV VIRTUAL_ENV=/opt/triggerhook/venv \
    PATH=/opt/triggerhook/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TRIGGERHOOK_CONFIG=/etc/triggerhook/triggerhook.toml \
    TRIGGERHOOK_HTTP_HOST=0.0.0.0
USER 10001:10001
EXPOSE 8080
# SIGTERM: fire what is armed, wait for the broker's confirms, release the
# rest: at most shutdown_timeout_s + 20 s (35 s at the defaults). Give it
# shutdown_timeout_s + 30 s: docker stop -t 60 (compose: stop_grace_period).
STOPSIGNAL SIGTERM
# Slim images have no curl. The port: TRIGGERHOOK_HTTP_PORT, default 8080.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:' + os.environ.get('TRIGGERHOOK_HTTP_PORT', '8080') + '/healthz', timeout=4)"]
ENTRYPOINT ["triggerhook"]
CMD ["run"]
