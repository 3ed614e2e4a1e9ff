"""Fixtures for integration tests against real MariaDB and RabbitMQ."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from support.amqp import AmqpNames, EventConsumer
from support.commands import CommandClient, Consumers, delete_queues
from support.daemon import DaemonGroup, TaskTable
from support.hook import HookFactory, RowReader
from support.http import ROUTED, Api, api_daemon

from triggerhook.store.mysql import init_schema


@pytest.fixture
def hooks(database_url: str, amqp_url: str, amqp_names: AmqpNames) -> Iterator[HookFactory]:
    with contextlib.ExitStack() as stack:
        yield HookFactory(database_url, amqp_url, amqp_names.exchange, stack)


@pytest.fixture
def rows(database_url: str) -> Iterator[RowReader]:
    """Reads ``th_tasks`` back over a separate connection (the schema is applied)."""
    init_schema(database_url)
    reader = RowReader(database_url)
    try:
        yield reader
    finally:
        reader.close()


@pytest.fixture
def daemons() -> Iterator[DaemonGroup]:
    """Daemon processes started by the test; any still running are killed after it."""
    with DaemonGroup() as group:
        yield group


@pytest.fixture
def table(database_url: str) -> Iterator[TaskTable]:
    """The test database with the schema applied, read directly."""
    init_schema(database_url)
    with TaskTable(database_url) as reader:
        yield reader


# -- the AMQP command channel (test_commands.py, test_command_auth.py) -----------------


@pytest.fixture
def command_queue(amqp_url: str, amqp_names: AmqpNames) -> Iterator[str]:
    """The test's command queue (the name its daemons get from daemon_env)."""
    queue = amqp_names.commands
    yield queue
    delete_queues(amqp_url, queue)


@pytest.fixture
def consumers(hooks: HookFactory, command_queue: str) -> Iterator[Consumers]:
    """In-process command consumers, stopped after the test; none may have failed."""
    group = Consumers()
    yield group
    group.close()
    assert group.failures == []


@pytest.fixture
def client(amqp_url: str, command_queue: str) -> Iterator[CommandClient]:
    """A command client without a token (a test adds its own headers)."""
    with CommandClient(amqp_url, command_queue) as commands:
        yield commands


@pytest.fixture
def event_queue(amqp_url: str, amqp_names: AmqpNames) -> Iterator[EventConsumer]:
    """Keeps only ``fire.#`` events: any other routing key is unroutable."""
    consumer = EventConsumer(amqp_url, amqp_names, binding="fire.#")
    consumer.declare()
    try:
        yield consumer
    finally:
        consumer.close()


# -- a daemon of the module's own, over HTTP -------------------------------------------


@pytest.fixture(scope="module")
def api(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    """A daemon (HTTP and firing) with the default settings, its events
    consumed (``fire.#``); a module that needs other settings defines its own
    ``api``. It must take every request of the module without a traceback."""
    with api_daemon(mysql_url, amqp_url, default_routing_key=ROUTED) as served:
        yield served
        assert served.daemon.terminate() == 0, served.daemon.tail()
        assert served.daemon.count("Traceback") == 0, served.daemon.tail()


@pytest.fixture
def http(api: Api) -> Iterator[httpx.Client]:
    """An HTTP client of the module's daemon (its token, if it has one)."""
    with api.client() as client:
        yield client


# -- fresh venvs (test_client_install.py, test_dev_mode.py) ------------------------------

REPO = Path(__file__).resolve().parents[2]


def _pip_run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels of the client (built from client/), the daemon (built from .) and
    everything they depend on, at the versions of constraints.txt, fetched
    from the index or pip's cache: built once per test session (per xdist
    worker) for every fresh venv to install from, and from nothing else."""
    wheels = tmp_path_factory.mktemp("wheelhouse")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    built = _pip_run(
        [*pip, "wheel", "-q", "-c", "constraints.txt", "-w", str(wheels), "./client", "."]
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return wheels


FreshVenv = Callable[..., Path]


@pytest.fixture(scope="session")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> FreshVenv:
    """``fresh_venv(name, *distributions)``: a new venv (pip only: no system
    site-packages, nothing of the tests' venv) with those distributions and
    what they require installed by pip from the wheelhouse alone (--no-index),
    at the versions of constraints.txt."""

    def make(name: str, *distributions: str) -> Path:
        venv = tmp_path_factory.mktemp(name) / "venv"
        made = _pip_run([sys.executable, "-m", "venv", str(venv)])
        assert made.returncode == 0, made.stderr
        pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
        offline = ["--no-index", "--find-links", str(wheelhouse), "-c", "constraints.txt"]
        installed = _pip_run([*pip, "install", "-q", *offline, *distributions])
        assert installed.returncode == 0, installed.stdout + installed.stderr
        return venv

    return make
