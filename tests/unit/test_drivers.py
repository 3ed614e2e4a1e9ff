"""The driver seam (store/mysql/drivers.py): both drivers' exceptions translate into
the project's errors alike, and a driver that is not there is a clear error."""

from __future__ import annotations

import sys

import MySQLdb
import pymysql
import pytest

from triggerhook.errors import ConfigError, SchemaError, StoreError, StoreUnavailable
from triggerhook.store.mysql import drivers

DRIVERS = {"pymysql": pymysql.err, "mysqldb": MySQLdb}


@pytest.mark.parametrize("name", list(DRIVERS))
@pytest.mark.parametrize(
    ("kind", "code", "expected"),
    [
        ("OperationalError", 2002, StoreUnavailable),  # can't connect (MariaDB's library)
        ("OperationalError", 2003, StoreUnavailable),  # can't connect (PyMySQL)
        ("OperationalError", 2013, StoreUnavailable),  # lost connection
        ("OperationalError", 1213, StoreUnavailable),  # deadlock: retried
        ("InterfaceError", 0, StoreUnavailable),  # connection already closed
        ("OperationalError", 2026, StoreUnavailable),  # TLS refused, named as such
        ("OperationalError", 1049, SchemaError),  # no such database
        ("ProgrammingError", 1146, SchemaError),  # no such table
        ("IntegrityError", 1062, StoreError),  # duplicate key: not transient
        ("OperationalError", 1045, StoreError),  # access denied: not transient
    ],
)
def test_exceptions_translate_alike(
    name: str, kind: str, code: int, expected: type[Exception]
) -> None:
    driver = drivers.load(name)
    exc = getattr(DRIVERS[name], kind)(code, "message")
    translated = driver.translate(exc, "th")
    assert type(translated) is expected
    assert "message" in str(translated) or "th" in str(translated)


@pytest.mark.parametrize("name", list(DRIVERS))
def test_a_connection_error_without_a_code_is_unavailable(name: str) -> None:
    driver = drivers.load(name)
    exc = DRIVERS[name].OperationalError("no code")
    assert driver.is_connection_error(exc)
    assert isinstance(driver.translate(exc, "th"), StoreUnavailable)
    assert not driver.is_connection_error(DRIVERS[name].IntegrityError(1062, "dup"))


def test_the_two_drivers_and_an_unknown_one() -> None:
    assert {drivers.load(name).package for name in drivers.NAMES} == {"PyMySQL", "mysqlclient"}
    assert drivers.default().name == "mysqldb"  # installed with the dev extras
    with pytest.raises(ConfigError, match="driver 'asyncmy' is not supported"):
        drivers.load("asyncmy")


def test_mysqlclient_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "MySQLdb", None)  # import fails
    with pytest.raises(ConfigError, match=r"pip install 'triggerhook\[mysqlclient\]'"):
        drivers.load("mysqldb")
