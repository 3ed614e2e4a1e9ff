"""Metrics sinks for InfluxDB (the :class:`~triggerhook.interfaces.MetricsSink` seam).

Which server each sink speaks to (``metrics_influx_version``):

* :class:`InfluxV1Sink` (``1``): the InfluxDB 1.x write API, ``POST /write?db=&rp=
  &precision=ms`` with line protocol, HTTP basic authentication when a user is
  set. Tested against InfluxDB 1.6 (Debian's package, which scripts/test
  installs and starts); every 1.x release serves this endpoint (1.0-1.11), and
  InfluxDB 3.x serves it too for v1 clients (untested here). A missing
  database is created (``CREATE DATABASE`` through ``/query``, once per
  "database not found" answer, as Telegraf does); that needs an admin user
  when authentication is on.
* :class:`InfluxV2Sink` (``2``): ``POST /api/v2/write?org=&bucket=&precision=ms``
  through ``influxdb-client``'s synchronous write API, ``Authorization: Token``.
  InfluxDB 2.x serves that API, and so, by their documentation, do InfluxDB 3.x
  (``org`` ignored) and 1.8+ (bucket ``database/retention_policy``, token
  ``user:password``). No such server can be installed here: the sink is tested
  against a local stand-in HTTP server that checks the requests and plays back
  the servers' answers.

Both translate failures at this boundary: no connection, a timeout (each
phase of a write is bounded by ``timeout_s``: ``metrics_timeout_ms``), 408,
429 or 5xx -> :class:`~triggerhook.errors.MetricsUnavailable` (the reporter
keeps the points and tries again); any other 4xx (bad credentials, unknown
database or bucket, points refused) and 1.x's "retention policy not found" ->
:class:`~triggerhook.errors.MetricsRejected`, with the server's error text.
Points that line protocol cannot carry are logged and left out of the write
(see :mod:`triggerhook.metrics.lineprotocol`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx
import urllib3.exceptions

from triggerhook.errors import MetricsRejected, MetricsUnavailable
from triggerhook.logs import redact
from triggerhook.metrics.lineprotocol import InvalidPoint, encode_point
from triggerhook.runtime.points import Point

if TYPE_CHECKING:
    from influxdb_client.client.influxdb_client import InfluxDBClient
    from influxdb_client.client.write_api import WriteApi


log = logging.getLogger(__name__)

_RETRIED_STATUSES = frozenset({408, 429})  # besides every 5xx
_CONTENT_TYPE = "text/plain; charset=utf-8"
_ERROR_TEXT_MAX = 500


def check_url(url: str) -> str:
    """``url`` without a trailing slash, if it is an http(s) base URL; else
    ValueError (naming the URL without its password)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{redact(url)!r} is not an http:// or https:// URL with a host")
    if parts.query or parts.fragment:
        raise ValueError(f"{redact(url)!r}: a base URL takes no query or fragment")
    return url.rstrip("/")


def encode_batch(points: Sequence[Point]) -> bytes:
    """The points as line protocol; the ones it cannot carry are logged and left out."""
    lines: list[str] = []
    invalid: list[str] = []
    for point in points:
        try:
            lines.append(encode_point(point))
        except InvalidPoint as exc:
            invalid.append(str(exc))
    if invalid:
        log.error(
            "left out %d metrics point(s) InfluxDB cannot store, e.g. %s", len(invalid), invalid[0]
        )
    return "\n".join(lines).encode()


def raise_for_status(status: int, error: str, what: str) -> None:
    """Nothing for a 2xx; else the exception the status means (see the module doc)."""
    if 200 <= status < 300:
        return
    message = f"{what}: HTTP {status}: {error.strip()}"
    retry_fixes_it = status in _RETRIED_STATUSES or status >= 500
    # 1.x answers a write to an unknown retention policy with a 500.
    if retry_fixes_it and not error.startswith("retention policy not found"):
        raise MetricsUnavailable(message)
    raise MetricsRejected(message)


def _describe(exc: BaseException) -> str:
    # A client library's error text may quote the request URL, credentials included.
    return redact(f"{type(exc).__name__}: {exc}") if str(exc) else type(exc).__name__


def _error_text(response: httpx.Response) -> str:
    """InfluxDB 1.x's error message: the JSON body's "error", its header, or the text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])
    header = response.headers.get("X-Influxdb-Error")
    if header:
        return str(header)
    return response.text[:_ERROR_TEXT_MAX] or response.reason_phrase


def _quote_identifier(name: str) -> str:
    """An InfluxQL double-quoted identifier."""
    escaped = name.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


class InfluxV1Sink:
    """Writes to InfluxDB 1.x's ``/write`` over one keep-alive httpx client."""

    def __init__(
        self,
        url: str,
        database: str,
        retention_policy: str = "",
        username: str = "",
        password: str = "",
        timeout_s: float = 2.0,
        *,
        create_database: bool = True,
    ) -> None:
        if not database:
            raise ValueError("database: must not be empty")
        self.url = check_url(url)
        # Messages and logs name this form: credentials in the URL are masked.
        self.shown_url = redact(self.url)
        self.database = database
        self._create_database = create_database
        self._create_tried = False  # since the last successful write
        self._params = {"db": database, "precision": "ms"}
        if retention_policy:
            self._params["rp"] = retention_policy
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s),
            auth=httpx.BasicAuth(username, password) if username else None,
            trust_env=False,  # a proxy from the environment is not meant for InfluxDB
        )

    def write(self, points: Sequence[Point]) -> None:
        body = encode_batch(points)
        if not body:
            return
        response = self._post_write(body)
        if self._is_missing_database(response):
            self._create()
            response = self._post_write(body)
        raise_for_status(
            response.status_code, _error_text(response), f"InfluxDB write to {self.shown_url}"
        )
        self._create_tried = False

    def close(self) -> None:
        self._client.close()

    def _post_write(self, body: bytes) -> httpx.Response:
        headers = {"Content-Type": _CONTENT_TYPE}
        try:
            return self._client.post(
                f"{self.url}/write", params=self._params, content=body, headers=headers
            )
        except httpx.TransportError as exc:
            raise MetricsUnavailable(f"InfluxDB at {self.shown_url}: {_describe(exc)}") from exc

    def _post_query(self, statement: str) -> httpx.Response:
        try:
            return self._client.post(f"{self.url}/query", data={"q": statement})
        except httpx.TransportError as exc:
            raise MetricsUnavailable(f"InfluxDB at {self.shown_url}: {_describe(exc)}") from exc

    def _is_missing_database(self, response: httpx.Response) -> bool:
        return (
            self._create_database
            and not self._create_tried
            and response.status_code == 404
            and _error_text(response).startswith("database not found")
        )

    def _create(self) -> None:
        self._create_tried = True
        statement = f"CREATE DATABASE {_quote_identifier(self.database)}"
        log.info("InfluxDB at %s has no database %r: %s", self.shown_url, self.database, statement)
        response = self._post_query(statement)
        what = f"InfluxDB {statement} at {self.shown_url}"
        raise_for_status(response.status_code, _error_text(response), what)
        # A failed statement still answers 200, with the error in its result.
        try:
            results = response.json().get("results") or [{}]
            error = results[0].get("error")
        except (ValueError, AttributeError, IndexError) as exc:
            raise MetricsRejected(f"{what}: unreadable answer {response.text[:200]!r}") from exc
        if error:
            raise MetricsRejected(f"{what}: {error}")


class InfluxV2Sink:
    """Writes to ``/api/v2/write`` (InfluxDB 2.x, 3.x, 1.8+) with ``influxdb-client``."""

    def __init__(self, url: str, org: str, bucket: str, token: str, timeout_s: float = 2.0) -> None:
        if not bucket:
            raise ValueError("bucket: must not be empty")
        self.url = check_url(url)
        self.shown_url = redact(self.url)  # for messages: credentials masked
        self.bucket = bucket
        self.org = org  # InfluxDB 3.x ignores it; sent even when empty (the client requires it)
        # Imported here: influxdb-client takes ~0.15 s to import, and only this sink needs it.
        from influxdb_client.client.exceptions import InfluxDBError  # noqa: PLC0415
        from influxdb_client.client.influxdb_client import InfluxDBClient  # noqa: PLC0415
        from influxdb_client.client.write_api import SYNCHRONOUS  # noqa: PLC0415
        from influxdb_client.domain.write_precision import WritePrecision  # noqa: PLC0415
        from influxdb_client.rest import ApiException  # noqa: PLC0415

        self._api_exception = ApiException  # an answer other than 2xx (or status 0: none)
        self._no_answer = (InfluxDBError, urllib3.exceptions.HTTPError, OSError)
        self._precision: WritePrecision = WritePrecision.MS  # type: ignore[assignment] # a str

        # timeout: urllib3's total timeout of one request, in ms; no retries
        # (the reporter retries, with the points it keeps).
        self._client: InfluxDBClient = InfluxDBClient(
            url=self.url,
            token=token,  # empty: no Authorization header
            org=org,
            timeout=max(1, round(timeout_s * 1000)),
        )
        self._write_api: WriteApi = self._client.write_api(write_options=SYNCHRONOUS)

    def write(self, points: Sequence[Point]) -> None:
        body = encode_batch(points)
        if not body:
            return
        what = f"InfluxDB write to {self.shown_url} (bucket {self.bucket!r})"
        try:
            self._write_api.write(
                bucket=self.bucket, org=self.org, record=body, write_precision=self._precision
            )
        except self._api_exception as exc:
            if not exc.status:  # the client's own failure (TLS, ...): no answer
                raise MetricsUnavailable(f"{what}: {redact(str(exc.reason))}") from exc
            raise_for_status(int(exc.status), str(exc.message), what)
            raise  # a 2xx never raises; keeps the type checker sure
        except self._no_answer as exc:
            raise MetricsUnavailable(f"{what}: {_describe(exc)}") from exc

    def close(self) -> None:
        self._write_api.close()  # type: ignore[no-untyped-call]
        self._client.close()  # type: ignore[no-untyped-call]
