"""Shared fixtures: per-test MariaDB databases and RabbitMQ exchanges/queues.

Services come from the environment (scripts/test makes sure local ones run):

* ``TRIGGERHOOK_TEST_MYSQL``  default ``mysql://root:@127.0.0.1:3306`` (the default driver)
* ``TRIGGERHOOK_TEST_AMQP``   default ``amqp://guest:guest@127.0.0.1:5672/%2F``
* ``TRIGGERHOOK_TEST_INFLUX`` default ``http://127.0.0.1:8086`` (InfluxDB 1.x)

Helpers live in tests/support (imported as ``support.*``: pytest puts tests/ on
sys.path because tests/ is not a package). Nothing here imports triggerhook.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator

import pika.exceptions
import pytest
from support import influx
from support.amqp import AmqpNames, EventConsumer, delete_topology
from support.mysql import temporary_database
from support.names import unique_name

DEFAULT_MYSQL_URL = "mysql://root:@127.0.0.1:3306"  # the default driver: mysqlclient
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


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
