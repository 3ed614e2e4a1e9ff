"""The two MySQL drivers triggerhook speaks, behind one small seam.

* **mysqlclient** (``mysql+mysqldb://``): C, on the MariaDB/MySQL client
  library; it decodes rows several times faster than PyMySQL and releases the
  GIL while it waits on the server. The default when it is installed
  (``pip install 'triggerhook[mysqlclient]'``; it compiles against
  libmariadb-dev or libmysqlclient-dev).
* **PyMySQL** (``mysql+pymysql://``): pure Python, installs anywhere.

Both follow PEP 249 and take ``%s`` parameters; what differs is gathered here:
how a connection is opened (their TLS arguments differ), pinged and named,
and which exception classes they raise. Every driver exception is translated
into the project's errors by :meth:`Driver.translate`, so no other module
needs to know which driver runs. A driver's module is imported only when a
URL names it.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from triggerhook.errors import (
    ConfigError,
    SchemaError,
    StoreError,
    StoreReadOnly,
    StoreUnavailable,
)
from triggerhook.store.mysql.sql import SESSION_CIPHER

# Server and client error codes after which the same operation may succeed.
_TRANSIENT_CODES = frozenset(
    {
        0,  # connection already closed (InterfaceError)
        1040,  # too many connections
        1047,  # Galera: this node is not (yet) in the primary component
        1053,  # server shutdown in progress
        1205,  # lock wait timeout
        1213,  # deadlock, transaction rolled back
        1158,  # network read error (and the next three: read timeout, write error, timeout)
        1159,
        1160,
        1161,
        1927,  # connection was killed
        1969,  # max_statement_time exceeded (the server stopped it: see ConnectionPool)
        2002,  # can't connect (MariaDB's client library, TCP too)
        2003,  # can't connect
        2005,  # unknown host (as PyMySQL's 2003 for a failed look-up: DNS may come back)
        2006,  # server has gone away
        2013,  # lost connection during query
        2014,  # commands out of sync (after a broken read)
        2055,  # lost connection (system error)
        4031,  # disconnected by the server for inactivity
    }
)
# Writes refused until an operator or a failover acts (StoreReadOnly); reads go
# on, and the session stays usable.
_READ_ONLY_CODES = frozenset(
    {
        1290,  # read_only, super_read_only: a demoted writer, an Aurora reader, a cluster expel
        1792,  # a READ ONLY transaction (transaction_read_only, set by the server or a proxy)
        1036,  # table is read only (MariaDB's innodb_read_only)
        1836,  # running in read-only mode (MySQL)
        1874,  # InnoDB is in read only mode (MySQL)
        3100,  # MySQL Group Replication: a member out of the group refuses every commit
    }
)
_FULL_CODES = frozenset({1021, 1114})  # disk full; table full (its tablespace cannot grow)
# Their message carries an errno ("Got error 28 "No space left on device" ..."):
# 1030 from the storage engine, 1180 during COMMIT.
_GOT_ERROR = 1030
_COMMIT_FAILED = 1180
_GOT_ERRNO = re.compile(r"Got error (\d+)")
_ENOSPC = 28  # the OS's "no space left on device"
_TABLE_READ_ONLY = 165  # the storage engine's HA_ERR_TABLE_READONLY
_SESSION_KEPT = _READ_ONLY_CODES | _FULL_CODES | {_GOT_ERROR, _COMMIT_FAILED}
_TLS_REFUSED = 2026  # the server does not do TLS, which the ssl_* parameters require
UNKNOWN_DATABASE = 1049
NO_SUCH_TABLE = 1146
DUPLICATE_KEY = 1062
# A statement the server stopped at its time limit: MariaDB's max_statement_time
# (1969, transient above: so on the engine's connections, where the limit only
# comes just before the client's own read timeout), MySQL's max_execution_time
# (3024). On the listing reads' connections it is TooCostly (ConnectionPool).
STATEMENT_TIMEOUT = frozenset({1969, 3024})

# executemany must keep one chunk in one statement (atomic under autocommit);
# this stays below the server's default max_allowed_packet of 16 MiB.
MAX_STATEMENT_BYTES = 12 * 1024 * 1024


class Cursor(Protocol):
    """What the store uses of a DBAPI cursor (both drivers' cursors have it)."""

    @property
    def rowcount(self) -> int: ...

    @property
    def connection(self) -> Any: ...

    def execute(self, query: str, args: Any = None) -> int: ...

    def executemany(self, query: str, args: Sequence[Any]) -> int | None: ...

    def fetchone(self) -> tuple[Any, ...] | None: ...

    def fetchall(self) -> Sequence[tuple[Any, ...]]: ...

    def __enter__(self) -> Cursor: ...

    def __exit__(self, *exc_info: object) -> None: ...


class Connection(Protocol):
    """What the store uses of a DBAPI connection."""

    def cursor(self) -> Cursor: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def close(self) -> None: ...

    def select_db(self, db: str) -> None: ...

    def thread_id(self) -> int: ...  # the session's id on the server (KILL QUERY names it)


@dataclass(frozen=True)
class Tls:
    """TLS as database_url asked for it: files (checked to exist) and checks."""

    ca: str | None
    cert: str | None
    key: str | None
    verify_cert: bool  # the chain, against ca (or the system's CAs without one)
    verify_identity: bool  # the host name too


@dataclass(frozen=True)
class Endpoint:
    """Where and how to connect, whatever the driver."""

    host: str
    port: int
    user: str
    password: str
    database: str | None  # None: connect to the server, no database selected
    charset: str
    unix_socket: str | None
    tls: Tls | None
    init_command: str
    connect_timeout_s: int = 5
    # A server that stops answering must not wedge a thread for ever.
    io_timeout_s: int = 30


@dataclass(frozen=True)
class Errors:
    """A driver's PEP 249 exception classes."""

    error: type[Exception]
    operational: type[Exception]
    interface: type[Exception]
    integrity: type[Exception]
    programming: type[Exception]


def _errors(module: Any) -> Errors:
    return Errors(
        error=module.MySQLError,
        operational=module.OperationalError,
        interface=module.InterfaceError,
        integrity=module.IntegrityError,
        programming=module.ProgrammingError,
    )


def error_code(exc: BaseException) -> int | None:
    """The server's or client library's error number (both drivers: ``args[0]``)."""
    return exc.args[0] if exc.args and isinstance(exc.args[0], int) else None


@dataclass(frozen=True)
class Driver:
    """One driver: its name in URLs, how to connect, and its errors."""

    name: str  # as in database_url: mysql+<name>://
    package: str  # the distribution, for messages
    version: str
    errors: Errors
    connect: Callable[[dict[str, Any]], Connection]
    arguments: Callable[[Endpoint, bool], dict[str, Any]]  # (endpoint, autocommit)
    ping: Callable[[Connection], None]
    server_version: Callable[[Connection], str]

    @property
    def dialect(self) -> str:
        """SQLAlchemy's name for it (Alembic's engine)."""
        return f"mysql+{self.name}"

    def is_connection_error(self, exc: BaseException) -> bool:
        """Whether ``exc`` may have left the connection unusable (a refused
        write leaves it as it was: both drivers call that an OperationalError)."""
        if error_code(exc) in _SESSION_KEPT:
            return False
        errors = self.errors
        return isinstance(exc, errors.operational | errors.interface | OSError)

    def is_driver_error(self, exc: BaseException) -> bool:
        return isinstance(exc, self.errors.error | OSError)

    def translate(self, exc: BaseException, database: str) -> Exception:
        """Map this driver's exception to the project's error hierarchy."""
        code = error_code(exc)
        refused = _refused(code, exc)
        if refused is not None:
            return refused
        if code in _TRANSIENT_CODES or (code is None and self.is_connection_error(exc)):
            return StoreUnavailable(f"database unavailable: {exc}")
        if code == _TLS_REFUSED:
            return StoreUnavailable(
                f"database unavailable: TLS (database_url's ssl_* parameters): {exc}"
            )
        if code == UNKNOWN_DATABASE:
            return SchemaError(f"database {database!r} does not exist: run `triggerhook db init`")
        if code == NO_SUCH_TABLE:
            return SchemaError(
                f"database {database!r} has no triggerhook tables: run `triggerhook db init`"
            )
        return StoreError(f"database error: {exc}")


def _refused(code: int | None, exc: BaseException) -> StoreUnavailable | None:
    """A refused write, transient: the database is read-only or full
    (:class:`StoreReadOnly`), or its COMMIT failed; None for any other error."""
    if code in _READ_ONLY_CODES:
        return StoreReadOnly(f"database read-only: {exc}")
    if code in _FULL_CODES:
        return StoreReadOnly(f"database full: {exc}", full=True)
    if code not in (_GOT_ERROR, _COMMIT_FAILED):
        return None
    errno = _errno(exc)
    if errno == _ENOSPC:
        return StoreReadOnly(f"database full: {exc}", full=True)
    if errno == _TABLE_READ_ONLY:
        return StoreReadOnly(f"database read-only: {exc}")
    if code == _COMMIT_FAILED:
        # The server rolled the transaction back (its binary log, a replication
        # hook): nothing was written, and every write of the store may be retried.
        return StoreUnavailable(f"database unavailable: COMMIT failed: {exc}")
    return None  # 1030 with another errno: the engine's own failure, not a passing one


def _errno(exc: BaseException) -> int | None:
    """The errno in a 1030 or 1180 message (both drivers: ``args[1]``)."""
    text = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], str) else ""
    found = _GOT_ERRNO.search(text)
    return int(found.group(1)) if found else None


# -- PyMySQL ----------------------------------------------------------------------------------


def _pymysql() -> Driver:
    import pymysql  # noqa: PLC0415  (imported when a URL names it)
    import pymysql.cursors  # noqa: PLC0415

    class PyMySQLCursor(pymysql.cursors.Cursor):
        max_stmt_length = MAX_STATEMENT_BYTES

    def arguments(endpoint: Endpoint, autocommit: bool) -> dict[str, Any]:
        kwargs = _common(endpoint, autocommit)
        kwargs["cursorclass"] = PyMySQLCursor
        kwargs["read_timeout"] = kwargs["write_timeout"] = endpoint.io_timeout_s
        tls = endpoint.tls
        if tls is not None:
            files = {"ssl_ca": tls.ca, "ssl_cert": tls.cert, "ssl_key": tls.key}
            kwargs.update({name: path for name, path in files.items() if path})
            kwargs["ssl_verify_cert"] = tls.verify_cert
            kwargs["ssl_verify_identity"] = tls.verify_identity
            if not tls.ca:  # PyMySQL asks for TLS only when some ssl_* argument is set
                kwargs["ssl"] = {"check_hostname": False}
        return kwargs

    def ping(conn: Any) -> None:
        conn.ping(reconnect=False)

    return Driver(
        name="pymysql",
        package="PyMySQL",
        version=pymysql.__version__,
        errors=_errors(pymysql.err),
        connect=lambda kwargs: pymysql.connect(**kwargs),
        arguments=arguments,
        ping=ping,
        # The handshake's server version, e.g. "10.11.6-MariaDB-0+deb12u1".
        server_version=lambda conn: str(getattr(conn, "server_version", "")),
    )


# -- mysqlclient ------------------------------------------------------------------------------


def _mysqlclient() -> Driver:
    try:
        import MySQLdb  # noqa: PLC0415  (imported when a URL names it)
        import MySQLdb.cursors  # noqa: PLC0415
    except ImportError as exc:
        raise ConfigError(
            f"database_url: mysql://, mysql+mysqldb:// need mysqlclient, which cannot be "
            f"imported ({exc}): pip install 'triggerhook[mysqlclient]' (it builds against "
            "libmariadb-dev), or use mysql+pymysql://"
        ) from exc

    class MySQLdbCursor(MySQLdb.cursors.Cursor):
        max_stmt_length = MAX_STATEMENT_BYTES

    def arguments(endpoint: Endpoint, autocommit: bool) -> dict[str, Any]:
        kwargs = _common(endpoint, autocommit)
        kwargs["cursorclass"] = MySQLdbCursor
        kwargs["read_timeout"] = kwargs["write_timeout"] = endpoint.io_timeout_s
        kwargs["multi_statements"] = False  # one statement per execute, as with PyMySQL
        # bytes as _binary'...' (as PyMySQL sends them): else the server reads
        # a payload in the connection's charset and replaces what is not utf8mb4.
        kwargs["binary_prefix"] = True
        tls = endpoint.tls
        if tls is not None:
            files = {"ca": tls.ca, "cert": tls.cert, "key": tls.key}
            kwargs["ssl"] = {name: path for name, path in files.items() if path} or True
            # On MariaDB's client library one switch checks the chain and the
            # host name together: verifying the certificate checks both there.
            if tls.verify_identity:
                kwargs["ssl_mode"] = "VERIFY_IDENTITY"
            elif tls.verify_cert:
                kwargs["ssl_mode"] = "VERIFY_CA"
            else:
                kwargs["ssl_mode"] = "REQUIRED"
        return kwargs

    def connect(kwargs: dict[str, Any]) -> Connection:
        conn: Any = MySQLdb.connect(**kwargs)
        if "ssl_mode" in kwargs and not _encrypted(conn):
            # MariaDB's client library insists on TLS only when it also verifies
            # the certificate: without, it would go on in plain text.
            conn.close()
            raise MySQLdb.OperationalError(
                _TLS_REFUSED, "TLS is required, but the session is not encrypted"
            )
        return cast(Connection, conn)

    def ping(conn: Any) -> None:
        conn.ping()

    def server_version(conn: Any) -> str:
        return str(conn.get_server_info())

    version = ".".join(str(part) for part in MySQLdb.version_info[:3])
    return Driver(
        name="mysqldb",
        package="mysqlclient",
        version=f"{version} (client library {_client_library(MySQLdb)})",
        errors=_errors(MySQLdb),
        connect=connect,
        arguments=arguments,
        ping=ping,
        server_version=server_version,
    )


def _encrypted(conn: Any) -> bool:
    cur = conn.cursor()
    try:
        cur.execute(SESSION_CIPHER)
        row = cur.fetchone()
    finally:
        cur.close()
    return bool(row and row[1])


def _client_library(module: Any) -> str:
    return str(module._mysql.get_client_info())  # untyped in the stubs


def _common(endpoint: Endpoint, autocommit: bool) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "host": endpoint.host,
        "port": endpoint.port,
        "user": endpoint.user,
        "password": endpoint.password,
        "charset": endpoint.charset,
        "autocommit": autocommit,
        "connect_timeout": endpoint.connect_timeout_s,
        "init_command": endpoint.init_command,
    }
    if endpoint.database is not None:
        kwargs["database"] = endpoint.database
    if endpoint.unix_socket is not None:
        kwargs["unix_socket"] = endpoint.unix_socket
    return kwargs


_LOADERS = {"pymysql": _pymysql, "mysqldb": _mysqlclient}
NAMES = tuple(_LOADERS)


def load(name: str) -> Driver:
    """The driver called ``name`` in URLs (``pymysql`` or ``mysqldb``); ConfigError if
    it is unknown or not installed."""
    try:
        loader = _LOADERS[name]
    except KeyError:
        raise ConfigError(
            f"database_url: driver {name!r} is not supported, use mysql+mysqldb:// "
            "(mysqlclient) or mysql+pymysql:// (PyMySQL)"
        ) from None
    return loader()


def default() -> Driver:
    """mysqlclient when it is installed, else PyMySQL (what ``mysql://`` means)."""
    if importlib.util.find_spec("MySQLdb") is not None:
        return load("mysqldb")
    return load("pymysql")
