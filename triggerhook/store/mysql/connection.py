"""Database connections: URL parsing, a small thread-safe pool.

``database_url`` is parsed by SQLAlchemy (:func:`sqlalchemy.engine.make_url`)
into a :class:`Target`: the driver its scheme names (``store/mysql/drivers.py``)
and where to connect, TLS included; a parameter it does not know, or a wrong
value, is a ConfigError naming it. Driver exceptions are translated into the
project's errors here and in the driver seam, so no other module needs to
know the driver.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pymysql.charset import charset_by_name

from triggerhook.errors import ConfigError, StoreUnavailable, TooCostly
from triggerhook.runtime import progress
from triggerhook.settings import parse_bool
from triggerhook.store.mysql import drivers
from triggerhook.store.mysql.drivers import (
    DUPLICATE_KEY,
    NO_SUCH_TABLE,
    STATEMENT_TIMEOUT,
    UNKNOWN_DATABASE,
    Connection,
    Cursor,
    Driver,
    Endpoint,
    Tls,
    error_code,
)
from triggerhook.store.mysql.sql import (
    IDLE_TRANSACTION_TIMEOUT,
    SELECT_TIME_LIMIT,
    STATEMENT_TIME_LIMIT,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = ["ConnectionPool", "Cursor", "Target", "open_connection", "target"]

log = logging.getLogger(__name__)

# The query parameters a database_url may carry; any other is refused by name.
_TLS_FILES = ("ssl_ca", "ssl_cert", "ssl_key")
_TLS_FLAGS = ("ssl_verify_cert", "ssl_verify_identity")
_PARAMETERS = ("charset", "unix_socket", *_TLS_FILES, *_TLS_FLAGS)
_URL_FORM = "mysql://user@host:port/database"
# READ COMMITTED: locking reads lock only the rows that match, so inserts,
# cancels and arming passes do not block on each other's gaps.
_SESSION_SETUP = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"
# How long before the client's read timeout MariaDB stops a statement.
STATEMENT_MARGIN_S = 1


@dataclass(frozen=True)
class Target:
    """A database to connect to, and the driver to do it with."""

    driver: Driver
    endpoint: Endpoint

    @property
    def database(self) -> str:
        return self.endpoint.database or ""

    def arguments(self, autocommit: bool = False) -> dict[str, Any]:
        """The driver's ``connect`` arguments."""
        return self.driver.arguments(self.endpoint, autocommit)


def parse_url(url: str) -> URL:
    """``url`` parsed by SQLAlchemy; ConfigError unless it is a MySQL/MariaDB URL."""
    # SQLAlchemy takes 0.2 s to import: paid by the commands that use a database only.
    from sqlalchemy.engine import make_url  # noqa: PLC0415
    from sqlalchemy.exc import ArgumentError  # noqa: PLC0415

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise ConfigError(f"database_url: not a database URL, expected {_URL_FORM}") from None
    backend, _, _ = parsed.drivername.partition("+")
    if backend not in ("mysql", "mariadb"):
        raise ConfigError(
            f"database_url: unsupported scheme {parsed.drivername!r}, use mysql:// "
            "(mysql+mysqldb:// or mysql+pymysql:// to name the driver)"
        )
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise ConfigError(f"database_url: port {parsed.port} is out of range")
    return parsed


def driver_of(url: str) -> Driver:
    """The driver ``url`` names: ``mysql+mysqldb://`` mysqlclient, ``mysql+pymysql://``
    PyMySQL; ``mysql://`` mysqlclient when it is installed, else PyMySQL."""
    name = parse_url(url).drivername.partition("+")[2]
    return drivers.load(name) if name else drivers.default()


def target(url: str, *, with_database: bool = True) -> Target:
    """The :class:`Target` of ``mysql[+driver]://user:pw@host:port/db?...``.

    Query parameters: ``charset``, ``unix_socket`` and the TLS ones:
    ``ssl_ca``, ``ssl_cert``, ``ssl_key`` (files, checked here),
    ``ssl_verify_cert`` and ``ssl_verify_identity`` (true or false). Any of
    them makes TLS required. With ``ssl_ca`` the server's certificate is
    verified unless ``ssl_verify_cert=false`` (as the MySQL client does); its
    host name only with ``ssl_verify_identity=true`` (with mysqlclient on
    MariaDB's client library, verifying the certificate checks the host name
    too: that library has one switch for both).
    """
    parsed = parse_url(url)
    database = parsed.database or ""
    if with_database and not database:
        raise ConfigError("database_url: no database name in the URL path")
    query = _query(parsed)
    charset = query.get("charset", "utf8mb4")
    if charset_by_name(charset) is None:
        raise ConfigError(f"database_url: charset {charset!r} is not known")
    endpoint = Endpoint(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 3306,
        user=parsed.username or "root",
        password=parsed.password or "",
        database=database if with_database else None,
        charset=charset,
        unix_socket=query.get("unix_socket"),
        tls=_tls(query),
        init_command=_SESSION_SETUP,
    )
    return Target(driver_of(url), endpoint)


def _query(parsed: URL) -> dict[str, str]:
    query: dict[str, str] = {}
    for name, value in parsed.query.items():
        if name not in _PARAMETERS:
            raise ConfigError(
                f"database_url: unknown parameter {name!r} (known: {', '.join(_PARAMETERS)})"
            )
        if not isinstance(value, str):
            raise ConfigError(f"database_url: parameter {name!r} is given more than once")
        query[name] = value
    return query


def _tls(query: dict[str, str]) -> Tls | None:
    if not any(name in query for name in (*_TLS_FILES, *_TLS_FLAGS)):
        return None
    files: dict[str, str] = {}
    for name in _TLS_FILES:
        if name in query:
            if not os.path.isfile(query[name]):
                raise ConfigError(f"database_url: {name}: no such file {query[name]!r}")
            files[name] = query[name]
    flags = {
        name: parse_bool(value, f"database_url: {name}")
        for name, value in query.items()
        if name in _TLS_FLAGS
    }
    if "ssl_key" in files and "ssl_cert" not in files:
        raise ConfigError("database_url: ssl_key needs ssl_cert (the client certificate)")
    if flags.get("ssl_verify_identity") and "ssl_ca" not in files:
        # The host name is checked only against a CA given.
        raise ConfigError("database_url: ssl_verify_identity needs ssl_ca")
    return Tls(
        ca=files.get("ssl_ca"),
        cert=files.get("ssl_cert"),
        key=files.get("ssl_key"),
        verify_cert=flags.get("ssl_verify_cert", "ssl_ca" in files),
        verify_identity=flags.get("ssl_verify_identity", False),
    )


def database_name(url: str) -> str:
    return parse_url(url).database or ""


def is_duplicate_key(exc: BaseException) -> bool:
    return error_code(exc) == DUPLICATE_KEY


def is_no_such_table(exc: BaseException) -> bool:
    return error_code(exc) == NO_SUCH_TABLE


def is_unknown_database(exc: BaseException) -> bool:
    return error_code(exc) == UNKNOWN_DATABASE


def open_connection(to: Target, autocommit: bool = False) -> Connection:
    driver = to.driver
    files = _tls_files(to.endpoint.tls)
    # Checked again here: mysqlclient reads them only after the server's greeting.
    gone = [f"{name}={path!r}" for name, path in files if not os.path.isfile(path)]
    if gone:
        raise StoreUnavailable(f"database unavailable: TLS files ({', '.join(gone)}): gone")
    try:
        return driver.connect(to.arguments(autocommit))
    except driver.errors.error as exc:
        raise driver.translate(exc, to.database) from exc
    except OSError as exc:  # PyMySQL, before connecting: the TLS files could not be loaded
        named = ", ".join(f"{name}={path!r}" for name, path in files)
        raise StoreUnavailable(f"database unavailable: TLS files ({named}): {exc}") from exc


def _tls_files(tls: Tls | None) -> list[tuple[str, str]]:
    if tls is None:
        return []
    files = (("ssl_ca", tls.ca), ("ssl_cert", tls.cert), ("ssl_key", tls.key))
    return [(name, path) for name, path in files if path]


class _Pooled:
    """A pooled connection, when it is to be replaced and when it was last borrowed."""

    __slots__ = ("borrowed", "conn", "expires")

    def __init__(self, conn: Connection, now: float, recycle_s: float) -> None:
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

    ``statement_timeout_ms`` (the listing reads' pool; 0: none but the
    engine's, below): the server stops a statement running this long
    (MariaDB: any statement; MySQL: a SELECT), raised as :class:`TooCostly`.
    """

    def __init__(
        self,
        to: Target,
        size: int,
        autocommit: bool = False,
        acquire_timeout_s: float = 30.0,
        idle_transaction_timeout_s: int = 0,
        recycle_s: float = 3600.0,
        ping_idle_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        statement_timeout_ms: int = 0,
    ) -> None:
        self._target = to
        self._statement_timeout_ms = statement_timeout_ms
        self._driver = to.driver
        # MariaDB aborts a transaction idle this long (0: never) and so frees
        # its locks: a process paused in the middle of one (a stop signal, a
        # VM suspended) must not keep other instances from rows whose lease ran
        # out. MySQL has no such variable; there, wait_timeout bounds it.
        self._idle_transaction_timeout_s = idle_transaction_timeout_s
        self._autocommit = autocommit
        self._database = to.database
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
        """A cursor in a transaction: committed on success, rolled back on error.
        Meanwhile the calling thread counts as waiting for the database (the
        watchdog's rule: :mod:`triggerhook.runtime.progress`)."""
        outer = progress.call_begins()
        if not self._slots.acquire(timeout=self._acquire_timeout_s):
            progress.call_ends(outer)
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
                if self._driver.is_driver_error(exc):
                    raise self._translate(exc) from exc
                raise
            self._idle.append(pooled)
        finally:
            self._slots.release()
            progress.call_ends(outer)

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
        elif self._alive(pooled.conn):
            return pooled
        else:
            log.info("a pooled database connection was dead: replaced")
            self._broken_at = now
        _close(pooled.conn)
        return self._open()

    def _open(self) -> _Pooled:
        conn = open_connection(self._target, self._autocommit)
        mariadb = self._is_mariadb(conn)
        if mariadb or self._statement_timeout_ms:
            try:
                with conn.cursor() as cur:
                    self._limit_session(cur, mariadb)
            except (self._driver.errors.error, OSError) as exc:
                _close(conn)
                raise self._driver.translate(exc, self._database) from exc
        return _Pooled(conn, self._clock(), self._recycle_s)

    def _limit_session(self, cur: Cursor, mariadb: bool) -> None:
        """The per-session bounds. A statement the client gave up on
        (io_timeout_s) would otherwise run on in the server: a metrics
        recount of a million rows under heavy inserts once took minutes, a
        new one started every 30 s, and they piled up. MariaDB stops it a
        moment before the client's read times out, and says why; on the
        listing reads' pool, at their own limit (MySQL too: its limit is
        for SELECTs only, which is what those reads are)."""
        if not mariadb:
            cur.execute(SELECT_TIME_LIMIT, (self._statement_timeout_ms,))
            return
        if self._idle_transaction_timeout_s:
            cur.execute(IDLE_TRANSACTION_TIMEOUT, (self._idle_transaction_timeout_s,))
        limit_s: float = max(1, self._target.endpoint.io_timeout_s - STATEMENT_MARGIN_S)
        if self._statement_timeout_ms:
            limit_s = min(limit_s, self._statement_timeout_ms / 1000)
        cur.execute(STATEMENT_TIME_LIMIT, (limit_s,))

    def _translate(self, exc: BaseException) -> Exception:
        """The driver's translation, but a statement stopped at this pool's
        own time limit is the reader's doing, not the database's: TooCostly."""
        if self._statement_timeout_ms and error_code(exc) in STATEMENT_TIMEOUT:
            return TooCostly(
                f"the query took longer than {self._statement_timeout_ms} ms, the limit for "
                "reads of many tasks (listing_timeout_ms): narrow the filter"
            )
        return self._driver.translate(exc, self._database)

    def _recycle_after_error(self, pooled: _Pooled, exc: BaseException) -> None:
        """Roll back; keep the connection only when the error was not the connection's."""
        broken = self._driver.is_connection_error(exc)
        if not broken:
            try:
                pooled.conn.rollback()
            except (self._driver.errors.error, OSError):
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

    def _alive(self, conn: Connection) -> bool:
        try:
            self._driver.ping(conn)
        except (self._driver.errors.error, OSError):
            return False
        return True

    def _is_mariadb(self, conn: Connection) -> bool:
        # The server's version, e.g. "10.11.6-MariaDB-0+deb12u1".
        return "MariaDB" in self._driver.server_version(conn)


def _close(conn: Connection) -> None:
    with contextlib.suppress(Exception):
        conn.close()
