"""InfluxDB 1.x helpers for tests: the server, per-test databases, InfluxQL queries,
and a private ``influxd`` a test may stop and start.

The shared server is the one scripts/test makes sure runs (``ensure_influxdb`` in
scripts/_services.sh; Debian's ``influxdb`` 1.6 package). Everything goes over its
HTTP API, so any InfluxDB 1.x works.

* :func:`influx_url` -- the server's base URL: ``TRIGGERHOOK_TEST_INFLUX``, default
  ``http://127.0.0.1:8086`` (the ``influx_url`` fixture).
* :func:`temporary_database` -- context manager: creates a database (a unique
  ``th_test_...`` name unless given), yields its name, drops it (the
  ``influx_database`` fixture).
* :func:`query` -- runs InfluxQL (``/query``, ``epoch=ms``: times are epoch-ms ints)
  and returns the :class:`Series` of the first statement's result; raises
  :class:`InfluxQueryError` when InfluxDB reports an error.
* :func:`rows` -- the same flattened into dicts, one per row, with the series'
  tags (from ``GROUP BY``) merged in. Example::

      rows(url, db, "SELECT fired, lateness_p99_ms FROM triggerhook")
      # [{"time": 1796000000000, "fired": 12, "lateness_p99_ms": 1.5}, ...]

* :class:`InfluxServer` -- a private ``influxd`` with its own data directory and
  ports (optionally with authentication on), which the test starts, stops and
  starts again; needs ``influxd`` installed locally (see :func:`influxd_path`).

Nothing here imports triggerhook.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from support.daemon import closed_port
from support.names import unique_name
from support.waiting import wait_until

DEFAULT_INFLUX_URL = "http://127.0.0.1:8086"
_TIMEOUT_S = 10.0


class InfluxQueryError(AssertionError):
    """InfluxDB answered a query with an error (the message is InfluxDB's)."""


@dataclass(frozen=True)
class Series:
    """One series of a query result: ``values`` are rows in ``columns`` order."""

    name: str
    columns: list[str]
    values: list[list[Any]]
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Each row as ``{column: value}``, with the series' tags merged in."""
        return [{**self.tags, **dict(zip(self.columns, row, strict=True))} for row in self.values]


def influx_url() -> str:
    """Base URL of the test InfluxDB 1.x (no trailing slash)."""
    return os.environ.get("TRIGGERHOOK_TEST_INFLUX", DEFAULT_INFLUX_URL).rstrip("/")


def quote_identifier(name: str) -> str:
    """An InfluxQL double-quoted identifier (database, measurement, tag key)."""
    escaped = name.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def ping(url: str, timeout_s: float = 2.0) -> bool:
    """True when ``GET /ping`` answers 204."""
    try:
        return httpx.get(f"{url}/ping", timeout=timeout_s, trust_env=False).status_code == 204
    except httpx.TransportError:
        return False


def query(
    url: str,
    database: str | None,
    influxql: str,
    *,
    auth: tuple[str, str] | None = None,
) -> list[Series]:
    """Run one InfluxQL statement; the series of its result (``[]``: none).

    Statements that change things (CREATE, DROP, GRANT) go as POST, others as GET.
    """
    params = {"q": influxql, "epoch": "ms"}
    if database is not None:
        params["db"] = database
    method = "GET" if influxql.lstrip().upper().startswith(("SELECT", "SHOW")) else "POST"
    response = httpx.request(
        method,
        f"{url}/query",
        params=params if method == "GET" else None,
        data=None if method == "GET" else params,
        auth=auth,
        timeout=_TIMEOUT_S,
        trust_env=False,
    )
    try:
        body = response.json()
    except ValueError:
        body = {}
    if response.status_code != 200 or "error" in body:
        raise InfluxQueryError(
            f"{influxql!r}: HTTP {response.status_code}: {body or response.text}"
        )
    result = body["results"][0]
    if "error" in result:
        raise InfluxQueryError(f"{influxql!r}: {result['error']}")
    return [
        Series(
            name=item.get("name", ""),
            columns=item["columns"],
            values=item["values"],
            tags=item.get("tags") or {},
        )
        for item in result.get("series", [])
    ]


def rows(
    url: str, database: str, influxql: str, *, auth: tuple[str, str] | None = None
) -> list[dict[str, Any]]:
    """All rows of all series of the query, as dicts (see :attr:`Series.rows`)."""
    return _all_rows(query(url, database, influxql, auth=auth))


def _all_rows(series: list[Series]) -> list[dict[str, Any]]:
    return [row for item in series for row in item.rows]


def database_names(url: str, *, auth: tuple[str, str] | None = None) -> set[str]:
    return {
        row["name"]
        for series in query(url, None, "SHOW DATABASES", auth=auth)
        for row in series.rows
    }


def create_database(url: str, name: str, *, auth: tuple[str, str] | None = None) -> None:
    query(url, None, f"CREATE DATABASE {quote_identifier(name)}", auth=auth)


def drop_database(url: str, name: str, *, auth: tuple[str, str] | None = None) -> None:
    """Drop ``name`` if it exists (InfluxDB's DROP DATABASE is idempotent)."""
    query(url, None, f"DROP DATABASE {quote_identifier(name)}", auth=auth)


@contextlib.contextmanager
def temporary_database(
    url: str, name: str | None = None, *, auth: tuple[str, str] | None = None
) -> Iterator[str]:
    """Create a database (unique ``th_test_...`` name by default); yield its name; drop it."""
    name = name or unique_name()
    create_database(url, name, auth=auth)
    try:
        yield name
    finally:
        drop_database(url, name, auth=auth)


# -- a private influxd ---------------------------------------------------------------


def influxd_path() -> str | None:
    """The local ``influxd`` binary (Debian's package puts it in /usr/bin), or None."""
    return shutil.which("influxd") or (
        "/usr/bin/influxd" if os.access("/usr/bin/influxd", os.X_OK) else None
    )


_CONFIG = """\
reporting-disabled = true
bind-address = "127.0.0.1:{rpc_port}"
[meta]
  dir = "{root}/meta"
[data]
  dir = "{root}/data"
  wal-dir = "{root}/wal"
  query-log-enabled = false
[http]
  bind-address = "127.0.0.1:{http_port}"
  auth-enabled = {auth_enabled}
  log-enabled = false
[monitor]
  store-enabled = false
[continuous_queries]
  enabled = false
"""


class InfluxServer:
    """A private ``influxd`` under ``root`` (data, config, log ``influxd.log``),
    on its own HTTP and RPC ports, kept across :meth:`stop`/:meth:`start`.

    Only the process this object started is ever signalled, by its own pid.
    With ``auth_enabled``, create the first (admin) user before anything else:
    ``query(server.url, None, "CREATE USER admin WITH PASSWORD 'x' WITH ALL PRIVILEGES")``.
    """

    def __init__(self, root: Path, *, auth_enabled: bool = False, influxd: str | None = None):
        binary = influxd or influxd_path()
        if binary is None:
            raise FileNotFoundError("influxd is not installed (scripts/test installs it)")
        self._influxd = binary
        self.root = root
        self.http_port = closed_port()
        rpc_port = closed_port()
        while rpc_port == self.http_port:
            rpc_port = closed_port()
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.log_path = root / "influxd.log"
        self._config_path = root / "influxdb.conf"
        self._config_path.write_text(
            _CONFIG.format(
                root=root,
                rpc_port=rpc_port,
                http_port=self.http_port,
                auth_enabled=str(auth_enabled).lower(),
            )
        )
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout_s: float = 30.0) -> None:
        """Start influxd and wait until ``/ping`` answers."""
        if self.running:
            raise RuntimeError("influxd is running already")
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [self._influxd, "-config", str(self._config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if not wait_until(lambda: ping(self.url, 1.0) or not self.running, timeout_s, 0.05):
            self.stop()
            raise AssertionError(f"influxd did not answer within {timeout_s}s: {self._log_tail()}")
        if not self.running:
            raise AssertionError(f"influxd exited at start: {self._log_tail()}")

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (InfluxDB's clean shutdown), SIGKILL after ``timeout_s``; reaped."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout_s)

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])
        except OSError as exc:
            return f"(no log: {exc})"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
