"""PyMySQL connections: URL parsing, a small thread-safe pool, error translation.

Every PyMySQL exception is translated here into the project's hierarchy, so no
other module needs to know the driver.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pymysql
import pymysql.cursors

from triggerhook.errors import ConfigError, SchemaError, StoreError, StoreUnavailable
from triggerhook.store.sql import IDLE_TRANSACTION_TIMEOUT

log = logging.getLogger(__name__)

# Server and client error codes after which the same operation may succeed.
_TRANSIENT_CODES = frozenset(
    {
        0,  # connection already closed (InterfaceError)
        1040,  # too many connections
        1053,  # server shutdown in progress
        1205,  # lock wait timeout
        1213,  # deadlock, transaction rolled back
        1927,  # connection was killed
        2003,  # can't connect
        2006,  # server has gone away
        2013,  # lost connection during query
        2014,  # commands out of sync (after a broken read)
        2055,  # lost connection (system error)
        4031,  # disconnected by the server for inactivity
    }
)
_UNKNOWN_DATABASE = 1049
_NO_SUCH_TABLE = 1146
_DUPLICATE_KEY = 1062


class Cursor(pymysql.cursors.Cursor):
    # executemany must keep one chunk in one statement (atomic under autocommit);
    # this stays below the server's default max_allowed_packet of 16 MiB.
    max_stmt_length = 12 * 1024 * 1024


def connect_params(url: str, *, with_database: bool = True) -> dict[str, Any]:
    """PyMySQL ``connect`` arguments from ``mysql+pymysql://user:pw@host:port/db``."""
    parts = urlsplit(url)
    if parts.scheme not in ("mysql", "mysql+pymysql", "mariadb", "mariadb+pymysql"):
        raise ConfigError(f"database_url: unsupported scheme {parts.scheme!r}, use mysql+pymysql")
    database = unquote(parts.path.lstrip("/"))
    if with_database and not database:
        raise ConfigError("database_url: no database name in the URL path")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    try:
        port = parts.port or 3306
    except ValueError as exc:
        raise ConfigError(f"database_url: {exc}") from exc
    params: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1",
        "port": port,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
        "charset": query.get("charset", "utf8mb4"),
        "autocommit": False,
        "cursorclass": Cursor,
        "connect_timeout": 5,
        # A server that stops answering must not wedge a thread for ever.
        "read_timeout": 30,
        "write_timeout": 30,
        # READ COMMITTED: range scans lock only the rows that match, so claims
        # by several instances and cancels do not block on each other's gaps.
        "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    }
    if "unix_socket" in query:
        params["unix_socket"] = query["unix_socket"]
    if with_database:
        params["database"] = database
    return params


def database_name(url: str) -> str:
    return unquote(urlsplit(url).path.lstrip("/"))


def is_duplicate_key(exc: BaseException) -> bool:
    return isinstance(exc, pymysql.err.IntegrityError) and exc.args[:1] == (_DUPLICATE_KEY,)


def translate(exc: BaseException, database: str) -> Exception:
    """Map a PyMySQL exception to the project's error hierarchy."""
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    if isinstance(exc, pymysql.err.OperationalError | pymysql.err.InterfaceError | OSError) and (
        code is None or code in _TRANSIENT_CODES
    ):
        return StoreUnavailable(f"database unavailable: {exc}")
    if code in _TRANSIENT_CODES:
        return StoreUnavailable(f"database unavailable: {exc}")
    if code == _UNKNOWN_DATABASE:
        return SchemaError(f"database {database!r} does not exist: run `triggerhook db init`")
    if code == _NO_SUCH_TABLE:
        return SchemaError(
            f"database {database!r} has no triggerhook tables: run `triggerhook db init`"
        )
    return StoreError(f"database error: {exc}")


def open_connection(params: dict[str, Any]) -> pymysql.connections.Connection[Cursor]:
    try:
        return pymysql.connect(**params)
    except pymysql.err.MySQLError as exc:
        raise translate(exc, str(params.get("database", ""))) from exc


def _is_mariadb(conn: pymysql.connections.Connection[Cursor]) -> bool:
    # The handshake's server version, e.g. "10.11.6-MariaDB-0+deb12u1" (not in
    # PyMySQL's type stubs).
    return "MariaDB" in str(getattr(conn, "server_version", ""))


class ConnectionPool:
    """A bounded pool; any thread may borrow. A connection that failed is discarded.

    With ``autocommit`` every statement commits by itself: one round trip
    fewer for work that is a single statement anyway.
    """

    def __init__(
        self,
        params: dict[str, Any],
        size: int,
        autocommit: bool = False,
        acquire_timeout_s: float = 30.0,
        idle_transaction_timeout_s: int = 0,
    ) -> None:
        self._params = {**params, "autocommit": autocommit}
        # MariaDB aborts a transaction idle this long (0: never) and so frees
        # its locks: a process paused in the middle of one (a stop signal, a
        # VM suspended) must not keep other instances from rows whose lease ran
        # out. MySQL has no such variable; there, wait_timeout bounds it.
        self._idle_transaction_timeout_s = idle_transaction_timeout_s
        self._autocommit = autocommit
        self._database = str(params.get("database", ""))
        self._idle: list[pymysql.connections.Connection[Cursor]] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(size)
        self._acquire_timeout_s = acquire_timeout_s

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """A cursor in a transaction: committed on success, rolled back on error."""
        if not self._slots.acquire(timeout=self._acquire_timeout_s):
            raise StoreUnavailable("no free database connection (pool exhausted)")
        try:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = self._open()
            try:
                with conn.cursor() as cur:
                    yield cur
                if not self._autocommit:
                    conn.commit()
            except BaseException as exc:
                self._recycle_after_error(conn, exc)
                if isinstance(exc, pymysql.err.MySQLError | OSError):
                    raise translate(exc, self._database) from exc
                raise
            with self._lock:
                self._idle.append(conn)
        finally:
            self._slots.release()

    def _open(self) -> pymysql.connections.Connection[Cursor]:
        conn = open_connection(self._params)
        if self._idle_transaction_timeout_s and _is_mariadb(conn):
            try:
                with conn.cursor() as cur:
                    cur.execute(IDLE_TRANSACTION_TIMEOUT, (self._idle_transaction_timeout_s,))
            except (pymysql.err.MySQLError, OSError) as exc:
                with contextlib.suppress(Exception):
                    conn.close()
                raise translate(exc, self._database) from exc
        return conn

    def _recycle_after_error(
        self, conn: pymysql.connections.Connection[Cursor], exc: BaseException
    ) -> None:
        """Roll back; keep the connection only when the error was not the connection's."""
        broken = isinstance(
            exc, pymysql.err.OperationalError | pymysql.err.InterfaceError | OSError
        )
        if not broken:
            try:
                conn.rollback()
            except (pymysql.err.MySQLError, OSError):
                broken = True
        if broken:
            with contextlib.suppress(Exception):
                conn.close()
            return
        with self._lock:
            self._idle.append(conn)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.close()
