"""Shared fixtures: per-test MariaDB databases and RabbitMQ exchanges/queues.

Services come from the environment (scripts/test makes sure local ones run):

* ``TRIGGERHOOK_TEST_MYSQL``  default ``mysql+pymysql://root:@127.0.0.1:3306``
* ``TRIGGERHOOK_TEST_AMQP``   default ``amqp://guest:guest@127.0.0.1:5672/%2F``

Helpers live in tests/support (imported as ``support.*``: pytest puts tests/ on
sys.path because tests/ is not a package). Nothing here imports triggerhook.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import warnings
from collections.abc import Iterator

import pika.exceptions
import pymysql
import pytest
from support.amqp import AmqpNames, EventConsumer, delete_topology
from support.mysql import connect

DEFAULT_MYSQL_URL = "mysql+pymysql://root:@127.0.0.1:3306"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def unique_name(prefix: str = "th_test_") -> str:
    """``th_test_`` + 8 hex digits."""
    return f"{prefix}{secrets.token_hex(4)}"


@pytest.fixture(scope="session")
def mysql_url() -> str:
    """Server URL without a database: ``mysql+pymysql://user:password@host:port``."""
    return os.environ.get("TRIGGERHOOK_TEST_MYSQL", DEFAULT_MYSQL_URL).rstrip("/")


@pytest.fixture(scope="session")
def amqp_url() -> str:
    return os.environ.get("TRIGGERHOOK_TEST_AMQP", DEFAULT_AMQP_URL)


@pytest.fixture
def database_url(mysql_url: str) -> Iterator[str]:
    """A fresh, empty utf8mb4 database for this test; dropped afterwards."""
    name = unique_name()
    conn = connect(mysql_url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
            )
    finally:
        conn.close()

    yield f"{mysql_url}/{name}"

    conn = connect(mysql_url)
    try:
        with conn.cursor() as cur:
            # Sessions the test leaked (a daemon thread still connected, an open
            # transaction) would hold metadata locks and make DROP DATABASE hang.
            cur.execute(
                "SELECT id FROM information_schema.processlist WHERE db = %s AND id <> "
                "CONNECTION_ID()",
                (name,),
            )
            for (session_id,) in cur.fetchall():
                with contextlib.suppress(pymysql.err.MySQLError):  # may be gone already
                    cur.execute(f"KILL CONNECTION {int(session_id)}")
            cur.execute("SET SESSION lock_wait_timeout = 30")
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        conn.close()


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
