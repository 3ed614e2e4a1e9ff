"""database_url -> the driver and its connect arguments (store/mysql/connection.py,
store/mysql/drivers.py), parsed by SQLAlchemy's make_url: every part, the TLS
parameters, and a ConfigError naming whatever is wrong. No database needed:
PyMySQL builds its connection (and TLS context) unconnected,
``defer_connect``; mysqlclient's arguments are checked as they are passed."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import certifi
import pymysql
import pymysql.cursors
import pytest

from triggerhook.errors import ConfigError
from triggerhook.store.mysql.connection import database_name, driver_of, target
from triggerhook.store.mysql.drivers import MAX_STATEMENT_BYTES

BASE = "mysql+pymysql://root:@127.0.0.1:3306/triggerhook"
CA = certifi.where()  # any PEM bundle of CA certificates will do


def connect_params(url: str, *, with_database: bool = True) -> dict[str, Any]:
    return target(url, with_database=with_database).arguments()


def _unconnected(params: dict[str, Any]) -> Any:
    """PyMySQL's connection built from ``params``, as connect() would, without
    connecting (Any: its ctx and _ssl_required are not in the type stubs)."""
    return pymysql.connections.Connection(**params, defer_connect=True)


def test_the_default_url() -> None:
    params = connect_params(BASE)
    assert {k: params[k] for k in ("host", "port", "user", "password", "database")} == {
        "host": "127.0.0.1",
        "port": 3306,
        "user": "root",
        "password": "",
        "database": "triggerhook",
    }
    assert params["charset"] == "utf8mb4"
    assert params["autocommit"] is False
    assert issubclass(params["cursorclass"], pymysql.cursors.Cursor)
    assert params["cursorclass"].max_stmt_length == MAX_STATEMENT_BYTES
    assert "READ COMMITTED" in params["init_command"]
    assert not any(name.startswith("ssl") for name in params)
    assert _unconnected(params).host == "127.0.0.1"


def test_the_parts_are_decoded() -> None:
    params = connect_params("mysql+pymysql://us%3Aer:p%40ss%2Fw@[::1]:3307/db%2Dx")
    assert (params["user"], params["password"]) == ("us:er", "p@ss/w")
    assert (params["host"], params["port"], params["database"]) == ("::1", 3307, "db-x")


def test_defaults_for_what_the_url_leaves_out() -> None:
    params = connect_params("mysql+pymysql://db.example/th")
    assert (params["host"], params["port"], params["user"], params["password"]) == (
        "db.example",
        3306,
        "root",
        "",
    )


@pytest.mark.parametrize(
    ("scheme", "driver"),
    [
        ("mysql+pymysql", "pymysql"),
        ("mariadb+pymysql", "pymysql"),
        ("mysql+mysqldb", "mysqldb"),
        ("mariadb+mysqldb", "mysqldb"),
        # No driver named: mysqlclient when it is installed (it is, with the dev extras).
        ("mysql", "mysqldb"),
        ("mariadb", "mysqldb"),
    ],
)
def test_the_scheme_names_the_driver(scheme: str, driver: str) -> None:
    assert driver_of(f"{scheme}://h/db").name == driver
    assert connect_params(f"{scheme}://h/db")["host"] == "h"


def test_without_the_database() -> None:
    assert "database" not in connect_params("mysql+pymysql://h", with_database=False)
    assert "database" not in connect_params(BASE, with_database=False)
    with pytest.raises(ConfigError, match="database_url: no database name"):
        connect_params("mysql+pymysql://h/")


def test_database_name() -> None:
    assert database_name(BASE) == "triggerhook"
    assert database_name("mysql+pymysql://h/a%20b") == "a b"
    assert database_name("mysql+pymysql://h") == ""


def test_charset_and_unix_socket() -> None:
    params = connect_params(f"{BASE}?charset=latin1&unix_socket=/run/mysqld/mysqld.sock")
    assert params["charset"] == "latin1"
    assert params["unix_socket"] == "/run/mysqld/mysqld.sock"
    assert _unconnected(params).encoding == "cp1252"


# -- refused, naming the cause --------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("postgresql://u@h/db", "scheme 'postgresql'"),
        ("sqlite:///x.db", "scheme 'sqlite'"),
        ("mysql+mysqlconnector://h/db", "driver 'mysqlconnector' is not supported"),
        ("mysql+pymysql://h:port/db", "not a database URL"),
        ("mysql+pymysql://h:70000/db", "port 70000 is out of range"),
        ("not a url", "not a database URL"),
        ("", "not a database URL"),
        (f"{BASE}?sslca=/x", "unknown parameter 'sslca'"),
        (f"{BASE}?ssl_mode=REQUIRED", "unknown parameter 'ssl_mode'"),
        (f"{BASE}?charset=utf8mb4&charset=latin1", "parameter 'charset' is given more than once"),
        (f"{BASE}?charset=klingon", "charset 'klingon' is not known"),
        (f"{BASE}?ssl_ca=/nonexistent/ca.pem", "ssl_ca: no such file '/nonexistent/ca.pem'"),
        (f"{BASE}?ssl_verify_cert=maybe", "ssl_verify_cert: expected true or false, got 'maybe'"),
        (f"{BASE}?ssl_verify_identity=true", "ssl_verify_identity needs ssl_ca"),
    ],
)
def test_a_wrong_url_is_a_config_error_naming_it(url: str, named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        connect_params(url)
    assert str(caught.value).startswith("database_url: ")
    assert named in str(caught.value)


def test_the_known_parameters_are_listed() -> None:
    with pytest.raises(ConfigError) as caught:
        connect_params(f"{BASE}?ssl=1")
    for name in ("charset", "unix_socket", "ssl_ca", "ssl_cert", "ssl_key", "ssl_verify_cert"):
        assert name in str(caught.value)


def test_errors_do_not_show_the_password() -> None:
    for url in ("mysql+pymysql://u:s3cret@h:x/db", "mysql+pymysql://u:s3cret@h/db?bad=1"):
        with pytest.raises(ConfigError) as caught:
            connect_params(url)
        assert "s3cret" not in str(caught.value)


# -- TLS --------------------------------------------------------------------------------------


def test_ssl_ca_verifies_the_certificate_but_not_the_host_name() -> None:
    params = connect_params(f"{BASE}?ssl_ca={CA}")
    assert (params["ssl_ca"], params["ssl_verify_cert"]) == (CA, True)
    ctx = _unconnected(params).ctx
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.check_hostname is False


def test_ssl_verify_identity_checks_the_host_name() -> None:
    params = connect_params(f"{BASE}?ssl_ca={CA}&ssl_verify_identity=true")
    assert params["ssl_verify_identity"] is True
    ctx = _unconnected(params).ctx
    assert (ctx.verify_mode, ctx.check_hostname) == (ssl.CERT_REQUIRED, True)


def test_ssl_verify_cert_false_is_encryption_without_verification() -> None:
    params = connect_params(f"{BASE}?ssl_ca={CA}&ssl_verify_cert=false")
    assert params["ssl_verify_cert"] is False
    assert _unconnected(params).ctx.verify_mode == ssl.CERT_NONE


def test_ssl_verify_cert_alone_uses_the_system_cas() -> None:
    params = connect_params(f"{BASE}?ssl_verify_cert=1")
    assert "ssl_ca" not in params and params["ssl_verify_cert"] is True
    assert _unconnected(params).ctx.verify_mode == ssl.CERT_REQUIRED


def test_client_certificate_and_key(tmp_path: Path) -> None:
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_text("not read here")
    key.write_text("not read here")
    params = connect_params(f"{BASE}?ssl_ca={CA}&ssl_cert={cert}&ssl_key={key}")
    assert (params["ssl_cert"], params["ssl_key"]) == (str(cert), str(key))
    with pytest.raises(ConfigError, match="ssl_key needs ssl_cert"):
        connect_params(f"{BASE}?ssl_key={key}")
    with pytest.raises(ConfigError, match="ssl_cert: no such file"):
        connect_params(f"{BASE}?ssl_cert={tmp_path / 'missing.pem'}")


def test_any_tls_parameter_makes_tls_required() -> None:
    """PyMySQL then refuses a server without TLS rather than going on in plain text
    (tests/integration/test_db_cli.py shows it against the real server)."""
    assert _unconnected(connect_params(f"{BASE}?ssl_ca={CA}"))._ssl_required is True
    assert _unconnected(connect_params(f"{BASE}?ssl_verify_cert=false"))._ssl_required is True
    assert _unconnected(connect_params(BASE))._ssl_required is False


# -- mysqlclient's arguments ------------------------------------------------------------------

MYSQLDB = "mysql+mysqldb://app:pw@db.example:3307/th"


def test_mysqlclient_arguments() -> None:
    import MySQLdb.cursors

    params = connect_params(f"{MYSQLDB}?charset=latin1&unix_socket=/run/mysqld/mysqld.sock")
    assert {k: params[k] for k in ("host", "port", "user", "password", "database")} == {
        "host": "db.example",
        "port": 3307,
        "user": "app",
        "password": "pw",
        "database": "th",
    }
    assert (params["charset"], params["unix_socket"]) == ("latin1", "/run/mysqld/mysqld.sock")
    assert params["autocommit"] is False
    assert (params["read_timeout"], params["write_timeout"], params["connect_timeout"]) == (
        30,
        30,
        5,
    )
    assert params["multi_statements"] is False  # one statement per execute, as PyMySQL
    assert params["binary_prefix"] is True  # payloads are bytes, not utf8mb4 text
    assert issubclass(params["cursorclass"], MySQLdb.cursors.Cursor)
    assert params["cursorclass"].max_stmt_length == MAX_STATEMENT_BYTES
    assert "READ COMMITTED" in params["init_command"]
    assert "ssl" not in params and "ssl_mode" not in params
    assert target(MYSQLDB).arguments(autocommit=True)["autocommit"] is True


@pytest.mark.parametrize(
    ("query", "ssl", "mode"),
    [
        (f"ssl_ca={CA}", {"ca": CA}, "VERIFY_CA"),
        (f"ssl_ca={CA}&ssl_verify_identity=true", {"ca": CA}, "VERIFY_IDENTITY"),
        (f"ssl_ca={CA}&ssl_verify_cert=false", {"ca": CA}, "REQUIRED"),
        ("ssl_verify_cert=1", True, "VERIFY_CA"),
        ("ssl_verify_cert=0", True, "REQUIRED"),
    ],
)
def test_mysqlclient_tls(query: str, ssl: object, mode: str) -> None:
    """Any TLS parameter makes TLS required (ssl_mode at least REQUIRED)."""
    params = connect_params(f"{MYSQLDB}?{query}")
    assert (params["ssl"], params["ssl_mode"]) == (ssl, mode)


def test_mysqlclient_client_certificate(tmp_path: Path) -> None:
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_text("not read here")
    key.write_text("not read here")
    params = connect_params(f"{MYSQLDB}?ssl_ca={CA}&ssl_cert={cert}&ssl_key={key}")
    assert params["ssl"] == {"ca": CA, "cert": str(cert), "key": str(key)}
