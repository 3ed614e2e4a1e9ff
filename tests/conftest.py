"""Shared fixtures: per-test MariaDB databases and RabbitMQ exchanges/queues.

Services come from the environment (scripts/test makes sure local ones run):

* ``TRIGGERHOOK_TEST_MYSQL``  default ``mysql://root:@127.0.0.1:3306`` (the default driver)
* ``TRIGGERHOOK_TEST_AMQP``   default ``amqp://guest:guest@127.0.0.1:5672/%2F``
* ``TRIGGERHOOK_TEST_INFLUX`` default ``http://127.0.0.1:8086`` (InfluxDB 1.x)

Helpers live in tests/support (imported as ``support.*``: pytest puts tests/ on
sys.path because tests/ is not a package). Nothing here imports triggerhook.

Every test gets its tier's marker here, by its directory (no test file names
its tier): ``unit``, ``contract``, ``integration``, ``model``, ``cluster``,
``sim``, ``container``; a test that uses the ``browser`` fixture (the web
view's, Chromium driven by Playwright) is ``browser`` instead of ``integration``.
``scripts/test TIER`` selects one (``pytest -m TIER``).
"""

from __future__ import annotations

import functools
import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika.exceptions
import pytest
from support import influx
from support.amqp import AmqpNames, EventConsumer, delete_topology
from support.logstate import LoggingState
from support.mysql import temporary_database
from support.names import unique_name

DEFAULT_MYSQL_URL = "mysql://root:@127.0.0.1:3306"  # the default driver: mysqlclient
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"

TESTS = Path(__file__).resolve().parent
# tests/<directory>/ -> its tier (registered as markers in pyproject.toml).
TIERS = {
    "unit": "unit",
    "contract": "contract",
    "integration": "integration",
    "model": "model",
    "cluster": "cluster",
    "sim": "sim",
    "container": "container",
}
# A tier's marker not listed in pyproject.toml's markers (registered below).
EXTRA_MARKERS = {
    "container": "tier tests/container: the image built and run by a container engine "
    "(scripts/image; skipped where no engine runs)",
}
BROWSER_FIXTURE = "browser"  # tests/integration/test_web_view.py: a Chromium
# Tests marked ``serial`` here: scripts/test runs them one at a time after the
# parallel part (pytest-xdist), as node id prefixes (relative to tests/) and why.
SERIAL = {
    # rabbitmqctl stop_app: every other test's broker goes away meanwhile.
    "integration/test_faults.py::test_rabbitmq_restart_while_tasks_come_due": "stops RabbitMQ",
    # A cluster of its own on fixed ports, and recovery times it reports.
    "cluster/": "its own Galera + RabbitMQ cluster",
    # A wrong wall clock's lateness bound (LATE_BOUND_MS) over a few seconds.
    "integration/test_clock_skew.py": "lateness bounds",
}


def tier_of(item: pytest.Item) -> str | None:
    """The tier of a test: its directory's, ``browser`` for one driving Chromium."""
    try:
        relative = item.path.resolve().relative_to(TESTS)
    except ValueError:
        return None
    tier = TIERS.get(relative.parts[0]) if len(relative.parts) > 1 else None
    if tier == "integration" and BROWSER_FIXTURE in getattr(item, "fixturenames", ()):
        return "browser"
    return tier


def is_serial(item: pytest.Item) -> bool:
    try:
        relative = item.path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return False
    node = relative + item.nodeid[len(item.nodeid.split("::", 1)[0]) :]
    return any(node.startswith(prefix) for prefix in SERIAL)


# Modules whose tests share fixtures beyond one test's: with scripts/test's
# ``-n N --dist loadgroup`` they run on one xdist worker, so that what they
# share is built once, not once per worker (the scheduler below). Named
# groups: both fresh-venv modules share the session's wheelhouse
# (tests/integration/conftest.py); the R8p model's searches take up to 9 GB
# each, so they run one after the other, never side by side.
SHARED_SCOPES = re.compile(r"""scope=["'](module|class|package)["']|\bdatabase_url_module\b""")
GROUPED_MODULES = {
    "tests/integration/test_client_install.py": "fresh-venv",
    "tests/integration/test_dev_mode.py": "fresh-venv",
    "tests/model/test_postponement_model.py": "spin-large",
    # One image build (scripts/image) and one engine for the container tier.
    "tests/container/test_image.py": "container-image",
    "tests/container/test_compose.py": "container-image",
}


@functools.cache
def _module_scope(module: str) -> str | None:
    """The work unit of a module's tests when they must stay on one worker."""
    if module in GROUPED_MODULES:
        return GROUPED_MODULES[module]
    path = TESTS.parent / module
    try:
        text = path.read_text()
    except OSError:
        return None
    return module if SHARED_SCOPES.search(text) else None


def xdist_scope(nodeid: str) -> str:
    """The xdist work unit of a test: its module's group (above), else itself."""
    return _module_scope(nodeid.split("::", 1)[0]) or nodeid


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook (scripts/test's -n)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``, grouping as :func:`xdist_scope` says. (xdist's own
    loadgroup reads ``xdist_group`` marks into node ids, which pytest 9's
    immutable node ids no longer take: it would group nothing.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class ByModuleScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return ByModuleScheduling(config, log)


# The longest modules of the parallel run (minutes each; see CI's --durations):
# collected first, so that the scheduler hands them out first and no worker
# starts one while the others are finishing.
LONG_FIRST = (
    "tests/model/test_postponement_model.py",
    "tests/model/test_ownership_model.py",
    "tests/model/test_dedup_model.py",
    "tests/integration/test_benchmarks_quick.py",
    "tests/container/test_image.py",  # builds the image first (minutes on a fresh machine)
)


def pytest_configure(config: pytest.Config) -> None:
    for name, meaning in EXTRA_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(LONG_FIRST))  # stable
    for item in items:
        tier = tier_of(item)
        if tier is not None:
            item.add_marker(tier)
        if is_serial(item):
            item.add_marker("serial")


@pytest.fixture(autouse=True)
def _logging_as_found() -> Iterator[None]:
    """Each test leaves logging as it found it (support/logstate.py says why)."""
    state = LoggingState.taken()
    yield
    state.restore()


@pytest.fixture(scope="session")
def mysql_url() -> str:
    """Server URL without a database: ``mysql://user:password@host:port``."""
    return os.environ.get("TRIGGERHOOK_TEST_MYSQL", DEFAULT_MYSQL_URL).rstrip("/")


@pytest.fixture(scope="session")
def amqp_url() -> str:
    return os.environ.get("TRIGGERHOOK_TEST_AMQP", DEFAULT_AMQP_URL)


@pytest.fixture
def database_url(mysql_url: str) -> Iterator[str]:
    """A fresh, empty utf8mb4 database for this test; dropped afterwards."""
    with temporary_database(mysql_url, unique_name()) as url:
        yield url


@pytest.fixture(scope="module")
def database_url_module(mysql_url: str) -> Iterator[str]:
    """Like ``database_url``, shared by the tests of one module (a costly fill)."""
    with temporary_database(mysql_url, unique_name()) as url:
        yield url


@pytest.fixture
def amqp_names(amqp_url: str) -> Iterator[AmqpNames]:
    """Unique exchange and queue names; both are deleted after the test."""
    names = AmqpNames(exchange=unique_name(), queue=unique_name())
    yield names
    try:
        delete_topology(amqp_url, names)
    except pika.exceptions.AMQPError as exc:
        warnings.warn(f"could not delete {names}: {exc!r}", stacklevel=1)


@pytest.fixture
def event_consumer(amqp_url: str, amqp_names: AmqpNames) -> Iterator[EventConsumer]:
    """Consumer of everything published to ``amqp_names.exchange`` (declared up front)."""
    consumer = EventConsumer(amqp_url, amqp_names)
    consumer.declare()
    try:
        yield consumer
    finally:
        consumer.close()


@pytest.fixture(scope="session")
def influx_url() -> str:
    """Base URL of the test InfluxDB 1.x; fails the test at once when it does not answer."""
    url = influx.influx_url()
    if not influx.ping(url):
        pytest.fail(
            f"InfluxDB does not answer GET {url}/ping (scripts/test starts a local one: "
            "ensure_influxdb in scripts/_services.sh; or set TRIGGERHOOK_TEST_INFLUX)"
        )
    return url


@pytest.fixture
def influx_database(influx_url: str) -> Iterator[str]:
    """A fresh InfluxDB database (unique ``th_test_...`` name); dropped afterwards."""
    with influx.temporary_database(influx_url) as name:
        yield name
