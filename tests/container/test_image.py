"""The image, built from the Dockerfile by a real engine (``scripts/image``:
podman here, on the stand-in base where the official one cannot be pulled)
and run as docs/deployment.md says to run it, against the host's MariaDB and
RabbitMQ (the containers share the host's network):

* the build context holds only what .dockerignore lets in; scripts/image
  reports the image's and the context's sizes as the engine and the context
  give them; the image is built on the base scripts/image chose (the stand-in,
  labelled a test aid, where the official one cannot be had), with Python
  3.11; its configuration (user, health check and its timing, stop signal,
  labels) is the Dockerfile's; the runtime image carries no compiler and no
  pip (the build stage does);
* ``--help`` and ``--version``;
* ``db init`` in a container, then ``run`` in a read-only container (no tmpfs
  at all), without capabilities, its secrets read from ``*_FILE`` files
  mounted into it: every process runs as uid 10001, nothing can be written,
  the HEALTHCHECK turns healthy, a task scheduled over HTTP fires;
* ``stop`` (SIGTERM) ends it with status 0 within the documented stop time
  with nothing lost, and so does ``kill -9`` followed by a new container:
  every task fires, none is left.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pika.exceptions
import pytest
from container.engine import (
    Container,
    Engine,
    healthcheck,
    image_script,
    run_detached,
    write_secret,
)
from support.amqp import AmqpNames, EventConsumer, delete_topology
from support.daemon import TaskTable, closed_port, collect_ids, missing_ids, report
from support.deploy import REPO, read_dockerfile
from support.mysql import temporary_database
from support.names import unique_name
from support.waiting import wait_for

from triggerhook.settings import Settings

UID = 10001  # the Dockerfile's USER
# docs/deployment.md, "Stopping": the graceful stop takes at most
# shutdown_timeout_s + 20 s (STOP_BOUND_S); whatever stops the daemon waits
# shutdown_timeout_s + 30 s: `docker stop -t 60`, compose's stop_grace_period.
STOP_BOUND_S = Settings().shutdown_timeout_s + 20
STOP_TIMEOUT_S = 60
START_TIMEOUT_S = 60.0
SECRETS_DIR = "/run/secrets"
ROUTING_KEY = "container.test"
# What the probe looks for: a compiler, pip on PATH, pip as a module of either Python.
TOOLS_PROBE = (
    "for tool in gcc cc c++ pip pip3 pip3.11; do command -v $tool; done; "
    "for py in python3 /opt/triggerhook/venv/bin/python; do "
    '$py -m pip --version 2>/dev/null && echo "$py -m pip"; done; true'
)


# -- the image, without running the daemon ------------------------------------------------


def _copied_sources() -> list[str]:
    dockerfile = read_dockerfile()
    return [
        source
        for stage in dockerfile.stages
        for copy in stage.copies()
        if copy.from_stage is None
        for source in copy.sources
    ]


def test_build_context_is_what_dockerignore_lets_in(engine: Engine) -> None:
    """What the engine copies for ``COPY .`` (scripts/image context): the
    Dockerfile's sources only, no .git, .venv, tests, caches; a few MB."""
    done = image_script("context", timeout_s=600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    total = lines.pop().split()
    assert total[0] == "TOTAL", total
    size, count = int(total[1]), int(total[2])
    files = [line.split(" ", 1)[1] for line in lines]
    assert len(files) == count
    sources = _copied_sources()
    stray = [f for f in files if not any(f == s or f.startswith(s + "/") for s in sources)]
    assert stray == [], f"in the build context but copied by no COPY: {stray}"
    assert not [f for f in files if "__pycache__" in f or ".egg-info" in f or "/build/" in f]
    # The listing is real: the package and the client are there.
    assert {"pyproject.toml", "client/pyproject.toml", "triggerhook/cli/__init__.py"} <= set(files)
    assert size < 5_000_000, f"a build context of {size} bytes"
    report(f"build context: {size} bytes in {count} files")


def test_image_configuration_is_the_dockerfiles(engine: Engine, image: str) -> None:
    found = engine.inspect(image, "image")
    config = found["Config"]
    assert config["User"] == f"{UID}:{UID}"
    assert config["Entrypoint"] == ["triggerhook"] and config["Cmd"] == ["run"]
    assert config["StopSignal"] == "SIGTERM"
    assert "8080/tcp" in config["ExposedPorts"]
    # The health check survives the build (podman keeps it in the docker format only),
    # with docs/deployment.md's timing: every 10 s after a 60 s start period.
    check = healthcheck(found)
    assert check.get("Test", [])[:3] == ["CMD", "python", "-c"], found
    seconds = {key: check.get(key, 0) / 1e9 for key in ("Interval", "Timeout", "StartPeriod")}
    assert seconds == {"Interval": 10, "Timeout": 5, "StartPeriod": 60}, check
    assert check.get("Retries") == 3, check
    labels = config["Labels"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert labels["org.opencontainers.image.version"] == project["version"]
    # The commit built: HEAD then (HEAD or one before it now; "unknown" without git).
    revision = labels["org.opencontainers.image.revision"]
    assert revision != "unknown" or not (REPO / ".git").exists()
    if revision != "unknown":
        assert re.fullmatch("[0-9a-f]{40}", revision), revision
        built = subprocess.run(
            ["git", "-C", str(REPO), "merge-base", "--is-ancestor", revision, "HEAD"],
            capture_output=True,
            check=False,
        )
        assert built.returncode == 0, f"{revision} is not HEAD or before it"
    base = engine.inspect(image_script("base").stdout.strip(), "image")
    added = int(found["Size"]) - int(base["Size"])
    report(f"image {image}: {found['Size']} bytes, {added} on top of its base")
    # The venv (~100 MB) and the client library; a compiler would add 150 MB more.
    assert added < 160_000_000, f"the image adds {added} bytes to its base"


def test_build_reports_the_image_and_context_sizes(
    engine: Engine, built: subprocess.CompletedProcess[str], image: str
) -> None:
    """scripts/image says how big the image and the build context are, and
    how long the build took: the figures the engine and the context give."""
    lines = [line.removeprefix("image: ").strip() for line in built.stderr.splitlines()]
    assert [line for line in lines if re.fullmatch(rf"built {image} with \w+ in \d+s.*", line)]
    [sized] = [line for line in lines if line.startswith("image: ")]
    found = re.fullmatch(
        r"image: [\d.]+ [kMG]?B \((\d+) bytes; its base (\S+): [\d.]+ [kMG]?B\)", sized
    )
    assert found, sized
    assert int(found[1]) == int(engine.inspect(image, "image")["Size"])
    assert found[2] == image_script("base").stdout.strip()
    [context] = [line for line in lines if line.startswith("build context: ")]
    listed = image_script("context", timeout_s=600)
    assert listed.returncode == 0, listed.stderr
    files = listed.stdout.strip().splitlines()[-1].split()[2]
    assert re.fullmatch(rf"build context: [\d.]+ [kMG]?B in {files} files .*", context), context


def test_image_is_built_on_the_base_scripts_image_chose(engine: Engine, image: str) -> None:
    """The official base where it can be had, else the stand-in, labelled a
    test aid; either way Python 3.11 (CI's minor) runs the daemon; and
    PYTHON_IMAGE names another base."""
    base_name = image_script("base").stdout.strip()
    base = engine.inspect(base_name, "image")
    layers = engine.inspect(image, "image")["RootFS"]["Layers"]
    assert layers[: len(base["RootFS"]["Layers"])] == base["RootFS"]["Layers"], base_name
    official = read_dockerfile().args["PYTHON_IMAGE"]  # python:3.11.7-slim-bookworm
    if base_name not in (official, f"docker.io/library/{official}"):
        labels = base["Config"].get("Labels") or {}
        assert "not for production" in labels.get("org.opencontainers.image.description", "")
    python = engine.ok(
        "run", "--rm", "--network", "none", "--entrypoint", "python", image, "--version"
    )
    assert python.startswith("Python 3.11."), python
    given = subprocess.run(
        [str(REPO / "scripts" / "image"), "base"],
        env={**os.environ, "PYTHON_IMAGE": "registry.example/python:3.11-test"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert given.returncode == 0, given.stderr
    assert given.stdout.strip() == "registry.example/python:3.11-test"
    assert "given (PYTHON_IMAGE)" in given.stderr


def test_runtime_image_has_no_compiler_and_no_pip(engine: Engine, image: str) -> None:
    def probe(name: str) -> str:
        return engine.ok(
            "run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", name, "-c", TOOLS_PROBE
        )

    assert probe(image).strip() == ""
    # The probe finds them where they are: in the build stage.
    stage = "triggerhook-build-stage:test"
    built = image_script("build", "--tag", stage, "--target", "build", timeout_s=1800)
    assert built.returncode == 0, built.stderr[-4000:]
    try:
        found = probe(stage)
    finally:
        engine("rmi", stage)
    assert "gcc" in found and "-m pip" in found, found


def test_help_and_version(engine: Engine, image: str) -> None:
    helped = engine.ok("run", "--rm", "--network", "none", image, "--help")
    assert helped.startswith("usage: triggerhook") and " run " in helped
    version = engine.ok("run", "--rm", "--network", "none", image, "--version")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert version.strip() == f"triggerhook {project['version']}"


# -- a deployment: db init, then the daemon, read-only, secrets from files ------------------


@dataclass
class Deployment:
    engine: Engine
    image: str
    database_url: str  # the test's own database (the host's MariaDB), as the host sees it
    names: AmqpNames
    consumer: EventConsumer
    secrets: Path  # mounted at SECRETS_DIR, read-only
    token: str
    port: int

    def env(self, instance: str) -> dict[str, str]:
        """The container's environment: names and ports, the secrets as *_FILE paths."""
        return {
            "TRIGGERHOOK_DATABASE_URL_FILE": f"{SECRETS_DIR}/database_url",
            "TRIGGERHOOK_AMQP_URL_FILE": f"{SECRETS_DIR}/amqp_url",
            "TRIGGERHOOK_API_TOKEN_FILE": f"{SECRETS_DIR}/api_token",
            "TRIGGERHOOK_EXCHANGE": self.names.exchange,
            "TRIGGERHOOK_COMMAND_QUEUE": self.names.commands,
            "TRIGGERHOOK_DEAD_LETTER_QUEUE": self.names.dead_letters,
            "TRIGGERHOOK_HTTP_PORT": str(self.port),
            "TRIGGERHOOK_INSTANCE_ID": instance,
        }

    def options(self) -> list[str]:
        """docs/deployment.md's confinement: read-only (and, stricter than it
        says, no tmpfs: podman's --read-only adds some unless told not to), no
        capabilities, no new privileges; the secrets mounted read-only."""
        options = ["--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
        if self.engine.name == "podman":
            options.append("--read-only-tmpfs=false")
        return [*options, "--volume", f"{self.secrets}:{SECRETS_DIR}:ro"]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A one-off command of the image (``run --rm``) with the deployment's settings."""
        argv = ["run", "--rm", "--network", "host", *self.options()]
        for key, value in self.env("cli").items():
            argv += ["--env", f"{key}={value}"]
        return self.engine(*argv, self.image, *args)

    def start(self, instance: str, init: bool = False) -> Container:
        """``run``, detached; returns once its HEALTHCHECK says healthy and
        /readyz answers 200 (the caller removes it)."""
        options = [*self.options(), *(["--init"] if init else [])]
        container = run_detached(self.engine, self.image, ["run"], self.env(instance), options)
        try:
            container.wait_healthy(START_TIMEOUT_S)
            wait_for(
                lambda: self.get("/readyz").status_code == 200,
                START_TIMEOUT_S,
                lambda: f"/readyz not 200\n{container.logs()}",
            )
        except BaseException:
            container.remove()
            raise
        return container

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> httpx.Response:
        try:
            return httpx.get(self.base_url + path, timeout=5)
        except httpx.HTTPError:
            return httpx.Response(599)

    def schedule(self, task_id: str, delay_ms: int, token: str | None = None) -> httpx.Response:
        return httpx.post(
            f"{self.base_url}/v1/tasks",
            json={"id": task_id, "delay_ms": delay_ms, "routing_key": ROUTING_KEY},
            headers={"Authorization": f"Bearer {token if token is not None else self.token}"},
            timeout=10,
        )


@contextlib.contextmanager
def deployment(
    engine: Engine, image: str, mysql_url: str, amqp_url: str, directory: Path
) -> Iterator[Deployment]:
    """A database, exchange and queues of its own, the secret files; all removed after."""
    names = AmqpNames(exchange=unique_name(), queue=unique_name())
    secrets_dir = directory / "secrets"
    secrets_dir.mkdir()
    secrets_dir.chmod(0o755)
    token = secrets.token_hex(16)
    with temporary_database(mysql_url, unique_name()) as database_url:
        write_secret(secrets_dir, "database_url", database_url, UID)
        write_secret(secrets_dir, "amqp_url", amqp_url, UID)
        write_secret(secrets_dir, "api_token", token, UID)
        consumer = EventConsumer(amqp_url, names)
        consumer.declare()
        try:
            yield Deployment(
                engine, image, database_url, names, consumer, secrets_dir, token, closed_port()
            )
        finally:
            consumer.close()
            with contextlib.suppress(pika.exceptions.AMQPError):
                delete_topology(amqp_url, names)


@dataclass
class Running:
    deployment: Deployment
    container: Container
    init_output: str


@pytest.fixture(scope="module")
def running(
    engine: Engine,
    image: str,
    mysql_url: str,
    amqp_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Running]:
    """``db init`` in a container, then the daemon in another, shared by the
    tests below (each checks one promise of it)."""
    with deployment(engine, image, mysql_url, amqp_url, tmp_path_factory.mktemp("run")) as dep:
        init = dep.cli("db", "init")
        assert init.returncode == 0, init.stdout + init.stderr
        container = dep.start("container-1")
        try:
            yield Running(dep, container, init.stdout + init.stderr)
        finally:
            container.remove()


def test_db_init_in_a_container_creates_the_schema(running: Running) -> None:
    with TaskTable(running.deployment.database_url) as table:
        tables = {row[0] for row in table.query("SHOW TABLES")}
    assert {"th_tasks", "th_shards", "th_meta"} <= tables, (tables, running.init_output)


def _processes(root: int) -> list[int]:
    """``root`` and its descendants (host pids), from /proc."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):
                todo += [int(child) for child in (task / "children").read_text().split()]
    return found


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":", 1) for line in lines if ":" in line)


def test_every_process_runs_as_the_image_user_without_capabilities(running: Running) -> None:
    root = int(running.container.state()["Pid"])
    pids = _processes(root)
    assert len(pids) >= 2, "the firing process and its API process"  # api_processes = 1
    for pid in pids:
        status = _status(pid)
        assert status["Uid"].split() == [str(UID)] * 4, (pid, status["Uid"])
        assert status["Gid"].split() == [str(UID)] * 4, (pid, status["Gid"])
        assert int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0, status
        assert status["NoNewPrivs"].strip() == "1"


def test_root_filesystem_is_read_only_and_the_daemon_needs_no_tmpfs(running: Running) -> None:
    container = running.container
    host_config = running.deployment.engine.inspect(container.name)["HostConfig"]
    assert host_config["ReadonlyRootfs"] is True
    mounts = container.exec("cat", "/proc/mounts").stdout.splitlines()
    assert not [m for m in mounts if m.split()[2] == "tmpfs" and m.split()[1] in ("/tmp", "/run")]
    for path in ("/tmp/x", "/etc/triggerhook/x", "/opt/triggerhook/venv/x", f"{SECRETS_DIR}/x"):
        wrote = container.exec("python", "-c", f"open({path!r}, 'w')")
        assert wrote.returncode != 0 and "Read-only file system" in wrote.stderr, (path, wrote)
    assert container.running(), container.logs()


def test_health_check_is_healthy_and_fails_where_nothing_answers(running: Running) -> None:
    container = running.container
    assert container.health() == "healthy"
    assert running.deployment.get("/healthz").status_code == 200
    # The image's own check command, pointed at a port where nothing listens: it fails.
    command = healthcheck(running.deployment.engine.inspect(running.deployment.image, "image"))
    assert command["Test"][0] == "CMD"
    elsewhere = container.exec(
        "env", f"TRIGGERHOOK_HTTP_PORT={closed_port()}", *command["Test"][1:]
    )
    assert elsewhere.returncode != 0


def test_secrets_come_from_the_mounted_files(running: Running) -> None:
    dep = running.deployment
    env = dep.engine.inspect(running.container.name)["Config"]["Env"]
    secret = ("TRIGGERHOOK_DATABASE_URL=", "TRIGGERHOOK_AMQP_URL=", "TRIGGERHOOK_API_TOKEN=")
    assert not [e for e in env if e.startswith(secret)], env
    assert f"TRIGGERHOOK_API_TOKEN_FILE={SECRETS_DIR}/api_token" in env
    shown = running.container.exec("triggerhook", "config", "show")
    assert shown.returncode == 0, shown.stderr
    for key in ("database_url", "amqp_url", "api_token"):
        line = next(line for line in shown.stdout.splitlines() if line.startswith(f"{key} ="))
        assert f"env file TRIGGERHOOK_{key.upper()}_FILE={SECRETS_DIR}/{key}" in line, line
    assert dep.token not in shown.stdout  # masked
    # The token from the file is the one in force.
    assert dep.schedule("secret-check", 3_600_000, token="not-the-token").status_code == 401


def test_a_task_scheduled_over_http_fires(running: Running) -> None:
    dep = running.deployment
    answer = dep.schedule("http-1", 0)
    assert answer.status_code == 201, answer.text
    events = dep.consumer.collect(1, timeout_s=20)
    assert [(e.message_id, e.routing_key) for e in events] == [("http-1", ROUTING_KEY)]


# -- stop and kill -9: nothing lost ------------------------------------------------------


def _schedule_spread(
    dep: Deployment, prefix: str, count: int, first_ms: int, last_ms: int
) -> set[str]:
    ids = set()
    for n in range(count):
        task_id = f"{prefix}-{n}"
        answer = dep.schedule(task_id, first_ms + (last_ms - first_ms) * n // max(1, count - 1))
        assert answer.status_code == 201, answer.text
        ids.add(task_id)
    return ids


@pytest.mark.slow
def test_stop_and_kill_lose_nothing(
    engine: Engine, image: str, mysql_url: str, amqp_url: str, tmp_path: Path
) -> None:
    """Tasks due over the next seconds; ``stop`` (the daemon as PID 1, as the
    image runs it, with docs/deployment.md's `stop -t 60`) must end in status 0
    within the documented bound (shutdown_timeout_s + 20 s), leaving what was
    not due in the database; a new container (under tini, as docs/deployment.md
    advises) fires it. Then ``kill -9`` of that one with tasks pending, and a
    third container: every task fires, none is left behind."""
    with deployment(engine, image, mysql_url, amqp_url, tmp_path) as dep:
        init = dep.cli("db", "init")
        assert init.returncode == 0, init.stdout + init.stderr
        first = dep.start("container-a")
        try:
            stopped_ids = _schedule_spread(dep, "stop", 20, 500, 6000)
            took_s = first.stop(STOP_TIMEOUT_S)
            assert first.exit_code() == 0, first.logs()
            assert "triggerhook stopped" in first.logs()
        finally:
            first.remove()
        report(f"stop: {took_s:.1f} s (at most {STOP_BOUND_S} s; stop -t {STOP_TIMEOUT_S})")
        assert took_s < STOP_BOUND_S
        with TaskTable(dep.database_url) as table:
            left = table.ids() & stopped_ids
        assert left, "every task fired before the stop: the stop was not tested"

        second = dep.start("container-a", init=True)
        try:
            received = collect_ids(dep.consumer, stopped_ids, timeout_s=30)
            assert missing_ids(stopped_ids, received) == set(), second.logs()
            killed_ids = _schedule_spread(dep, "kill", 20, 1500, 6000)
            second.kill()
            assert second.exit_code() == 137
        finally:
            second.remove()
        with TaskTable(dep.database_url) as table:
            assert table.ids() & killed_ids, "every task fired before the kill"

        started = time.monotonic()
        third = dep.start("container-a", init=True)
        try:
            received = collect_ids(dep.consumer, killed_ids, timeout_s=60)
            assert missing_ids(killed_ids, received) == set(), third.logs()
            report(
                f"kill -9: the next container fired the rest {time.monotonic() - started:.1f} s on"
            )
            took_s = third.stop(STOP_TIMEOUT_S)
            assert took_s < STOP_BOUND_S
            assert third.exit_code() == 0, third.logs()
        finally:
            third.remove()
        with TaskTable(dep.database_url) as table:
            assert table.ids() == set()
