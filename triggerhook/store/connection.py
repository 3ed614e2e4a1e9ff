"""PyMySQL connections: URL parsing, a small thread-safe pool, error translation.

``database_url`` is parsed by SQLAlchemy (:func:`sqlalchemy.engine.make_url`)
into PyMySQL's ``connect`` arguments, TLS included; a parameter it does not
know, or a wrong value, is a ConfigError naming it. Every PyMySQL exception is
translated here into the project's hierarchy, so no other module needs to know
the driver.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pymysql
import pymysql.cursors
from pymysql.charset import charset_by_name

from triggerhook.errors import ConfigError, SchemaError, StoreError, StoreUnavailable
from triggerhook.settings import parse_bool
from triggerhook.store.sql import IDLE_TRANSACTION_TIMEOUT

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

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
_TLS_REFUSED = 2026  # the server does not do TLS, which the ssl_* parameters require
_UNKNOWN_DATABASE = 1049
_NO_SUCH_TABLE = 1146
_DUPLICATE_KEY = 1062


class Cursor(pymysql.cursors.Cursor):
    # executemany must keep one chunk in one statement (atomic under autocommit);
    # this stays below the server's default max_allowed_packet of 16 MiB.
    max_stmt_length = 12 * 1024 * 1024


# The query parameters a database_url may carry; any other is refused by name.
_TLS_FILES = ("ssl_ca", "ssl_cert", "ssl_key")
_TLS_FLAGS = ("ssl_verify_cert", "ssl_verify_identity")
_PARAMETERS = ("charset", "unix_socket", *_TLS_FILES, *_TLS_FLAGS)
_URL_FORM = "mysql+pymysql://user@host:port/database"


def parse_url(url: str) -> URL:
    """``url`` parsed by SQLAlchemy; ConfigError unless it is a PyMySQL URL."""
    # SQLAlchemy takes 0.2 s to import: paid by the commands that use a database only.
    from sqlalchemy.engine import make_url  # noqa: PLC0415
    from sqlalchemy.exc import ArgumentError  # noqa: PLC0415

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise ConfigError(f"database_url: not a database URL, expected {_URL_FORM}") from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend not in ("mysql", "mariadb"):
        raise ConfigError(
            f"database_url: unsupported scheme {parsed.drivername!r}, use mysql+pymysql://"
        )
    # No driver named (mysql://) has always meant PyMySQL here (SQLAlchemy would
    # take mysqlclient); any other driver is not supported (yet).
    if driver not in ("", "pymysql"):
        raise ConfigError(
            f"database_url: driver {driver!r} is not supported, use mysql+pymysql:// (PyMySQL)"
        )
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise ConfigError(f"database_url: port {parsed.port} is out of range")
    return parsed


def connect_params(url: str, *, with_database: bool = True) -> dict[str, Any]:
    """PyMySQL ``connect`` arguments from ``mysql+pymysql://user:pw@host:port/db?...``.

    Query parameters: ``charset``, ``unix_socket`` and the TLS ones, passed to
    PyMySQL as its ``ssl_*`` arguments: ``ssl_ca``, ``ssl_cert``, ``ssl_key``
    (files, checked here), ``ssl_verify_cert`` and ``ssl_verify_identity``
    (true or false). Any of them makes TLS required. With ``ssl_ca`` the
    server's certificate is verified unless ``ssl_verify_cert=false`` (as the
    MySQL client does; PyMySQL alone would not); its host name only with
    ``ssl_verify_identity=true``.
    """
    parsed = parse_url(url)
    database = parsed.database or ""
    if with_database and not database:
        raise ConfigError("database_url: no database name in the URL path")
    params: dict[str, Any] = {
        "host": parsed.host or "127.0.0.1",
        "port": parsed.port or 3306,
        "user": parsed.username or "root",
        "password": parsed.password or "",
        "charset": "utf8mb4",
        "autocommit": False,
        "cursorclass": Cursor,
        "connect_timeout": 5,
        # A server that stops answering must not wedge a thread for ever.
        "read_timeout": 30,
        "write_timeout": 30,
        # READ COMMITTED: locking reads lock only the rows that match, so
        # inserts, cancels and arming passes do not block on each other's gaps.
        "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        **_query_params(parsed),
    }
    if with_database:
        params["database"] = database
    return params


def _query_params(parsed: URL) -> dict[str, Any]:
    query: dict[str, str] = {}
    for name, value in parsed.query.items():
        if name not in _PARAMETERS:
            raise ConfigError(
                f"database_url: unknown parameter {name!r} (known: {', '.join(_PARAMETERS)})"
            )
        if not isinstance(value, str):
            raise ConfigError(f"database_url: parameter {name!r} is given more than once")
        query[name] = value
    params: dict[str, Any] = {}
    if "charset" in query:
        if charset_by_name(query["charset"]) is None:
            raise ConfigError(f"database_url: charset {query['charset']!r} is not known")
        params["charset"] = query["charset"]
    if "unix_socket" in query:
        params["unix_socket"] = query["unix_socket"]
    return {**params, **_tls_params(query)}


def _tls_params(query: dict[str, str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name in _TLS_FILES:
        if name in query:
            if not os.path.isfile(query[name]):
                raise ConfigError(f"database_url: {name}: no such file {query[name]!r}")
            params[name] = query[name]
    for name in _TLS_FLAGS:
        if name in query:
            params[name] = parse_bool(query[name], f"database_url: {name}")
    if "ssl_key" in params and "ssl_cert" not in params:
        raise ConfigError("database_url: ssl_key needs ssl_cert (the client certificate)")
    if params.get("ssl_verify_identity") and "ssl_ca" not in params:
        # PyMySQL checks the host name only against a CA it was given.
        raise ConfigError("database_url: ssl_verify_identity needs ssl_ca")
    if "ssl_ca" in params:
        params.setdefault("ssl_verify_cert", True)
    return params


def database_name(url: str) -> str:
    return parse_url(url).database or ""


def is_duplicate_key(exc: BaseException) -> bool:
    return isinstance(exc, pymysql.err.IntegrityError) and exc.args[:1] == (_DUPLICATE_KEY,)


def is_no_such_table(exc: BaseException) -> bool:
    return isinstance(exc, pymysql.err.ProgrammingError) and exc.args[:1] == (_NO_SUCH_TABLE,)


def is_unknown_database(exc: BaseException) -> bool:
    return isinstance(exc, pymysql.err.MySQLError) and exc.args[:1] == (_UNKNOWN_DATABASE,)


def translate(exc: BaseException, database: str) -> Exception:
    """Map a PyMySQL exception to the project's error hierarchy."""
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    if isinstance(exc, pymysql.err.OperationalError | pymysql.err.InterfaceError | OSError) and (
        code is None or code in _TRANSIENT_CODES
    ):
        return StoreUnavailable(f"database unavailable: {exc}")
    if code in _TRANSIENT_CODES:
        return StoreUnavailable(f"database unavailable: {exc}")
    if code == _TLS_REFUSED:
        return StoreUnavailable(
            f"database unavailable: TLS (database_url's ssl_* parameters): {exc}"
        )
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
    except OSError as exc:  # before connecting: the TLS files could not be loaded
        files = ", ".join(f"{name}={params[name]!r}" for name in _TLS_FILES if name in params)
        raise StoreUnavailable(f"database unavailable: TLS files ({files}): {exc}") from exc


def _is_mariadb(conn: pymysql.connections.Connection[Cursor]) -> bool:
    # The handshake's server version, e.g. "10.11.6-MariaDB-0+deb12u1" (not in
    # PyMySQL's type stubs).
    return "MariaDB" in str(getattr(conn, "server_version", ""))


class _Pooled:
    """A pooled connection, when it is to be replaced and when it was last borrowed."""

    __slots__ = ("borrowed", "conn", "expires")

    def __init__(
        self, conn: pymysql.connections.Connection[Cursor], now: float, recycle_s: float
    ) -> None:
        self.conn = conn
        self.expires = now + recycle_s if recycle_s else float("inf")
        self.borrowed = now


# Not SQLAlchemy's QueuePool: its pre_ping is a round trip per checkout; here only after idling.
class ConnectionPool:
    """A bounded pool; any thread may borrow. A connection that failed is discarded.

    With ``autocommit`` every statement commits by itself: one round trip
    fewer for work that is a single statement anyway.

    On borrowing, a connection older than ``recycle_s`` (0: no limit) is
    closed and replaced, and one not borrowed for ``ping_idle_s`` (0: at every
    borrow) is pinged first and replaced if dead: after a database restart, or
    a server or proxy dropping idle sessions, the first statement gets a live
    connection. A connection last borrowed before another was found dead is
    pinged too, however recently (it may share that one's fate).
    """

    def __init__(
        self,
        params: dict[str, Any],
        size: int,
        autocommit: bool = False,
        acquire_timeout_s: float = 30.0,
        idle_transaction_timeout_s: int = 0,
        recycle_s: float = 3600.0,
        ping_idle_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._params = {**params, "autocommit": autocommit}
        # MariaDB aborts a transaction idle this long (0: never) and so frees
        # its locks: a process paused in the middle of one (a stop signal, a
        # VM suspended) must not keep other instances from rows whose lease ran
        # out. MySQL has no such variable; there, wait_timeout bounds it.
        self._idle_transaction_timeout_s = idle_transaction_timeout_s
        self._autocommit = autocommit
        self._database = str(params.get("database", ""))
        # A deque's append and pop are thread-safe: no lock on the hot path.
        self._idle: collections.deque[_Pooled] = collections.deque()
        self._slots = threading.BoundedSemaphore(size)
        self._acquire_timeout_s = acquire_timeout_s
        self._recycle_s = recycle_s
        self._ping_idle_s = ping_idle_s
        self._clock = clock
        # When a connection was last found dead.
        self._broken_at = float("-inf")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """A cursor in a transaction: committed on success, rolled back on error."""
        if not self._slots.acquire(timeout=self._acquire_timeout_s):
            raise StoreUnavailable("no free database connection (pool exhausted)")
        try:
            pooled = self._checkout()
            conn = pooled.conn
            try:
                with conn.cursor() as cur:
                    yield cur
                if not self._autocommit:
                    conn.commit()
            except BaseException as exc:
                self._recycle_after_error(pooled, exc)
                if isinstance(exc, pymysql.err.MySQLError | OSError):
                    raise translate(exc, self._database) from exc
                raise
            self._idle.append(pooled)
        finally:
            self._slots.release()

    def _checkout(self) -> _Pooled:
        """The most recently used idle connection, checked if due; else a new one."""
        try:
            pooled = self._idle.pop()
        except IndexError:
            return self._open()
        now = self._clock()
        if (
            now - pooled.borrowed >= self._ping_idle_s
            or now >= pooled.expires
            or pooled.borrowed < self._broken_at
        ):
            pooled = self._checked(pooled, now)
        pooled.borrowed = now
        return pooled

    def _checked(self, pooled: _Pooled, now: float) -> _Pooled:
        """``pooled`` if it is young enough and answers a ping, else a new connection."""
        if now >= pooled.expires:
            log.debug("replacing a database connection older than %.0f s", self._recycle_s)
        elif _alive(pooled.conn):
            return pooled
        else:
            log.info("a pooled database connection was dead: replaced")
            self._broken_at = now
        _close(pooled.conn)
        return self._open()

    def _open(self) -> _Pooled:
        conn = open_connection(self._params)
        if self._idle_transaction_timeout_s and _is_mariadb(conn):
            try:
                with conn.cursor() as cur:
                    cur.execute(IDLE_TRANSACTION_TIMEOUT, (self._idle_transaction_timeout_s,))
            except (pymysql.err.MySQLError, OSError) as exc:
                _close(conn)
                raise translate(exc, self._database) from exc
        return _Pooled(conn, self._clock(), self._recycle_s)

    def _recycle_after_error(self, pooled: _Pooled, exc: BaseException) -> None:
        """Roll back; keep the connection only when the error was not the connection's."""
        broken = isinstance(
            exc, pymysql.err.OperationalError | pymysql.err.InterfaceError | OSError
        )
        if not broken:
            try:
                pooled.conn.rollback()
            except (pymysql.err.MySQLError, OSError):
                broken = True
        if broken:
            self._broken_at = self._clock()
            _close(pooled.conn)
            return
        self._idle.append(pooled)

    def close(self) -> None:
        while True:
            try:
                pooled = self._idle.pop()
            except IndexError:
                return
            _close(pooled.conn)


def _alive(conn: pymysql.connections.Connection[Cursor]) -> bool:
    try:
        conn.ping(reconnect=False)
    except (pymysql.err.MySQLError, OSError):
        return False
    return True


def _close(conn: pymysql.connections.Connection[Cursor]) -> None:
    with contextlib.suppress(Exception):
        conn.close()
