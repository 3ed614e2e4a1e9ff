"""InfluxV2Sink (``/api/v2/write`` through influxdb-client) against a stand-in server.

No InfluxDB 2.x/3.x can be installed here, so a local HTTP server in a thread
plays one: it records each request (method, path, query, headers, body) and
answers with the status and error body a test scripts, or stalls. The same
stand-in checks the status mapping of InfluxV1Sink for the answers a real 1.x
server cannot be made to give (503, 429, 408). Also: sink_from_settings.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from support.daemon import closed_port

from triggerhook import Settings
from triggerhook.errors import ConfigError, MetricsRejected, MetricsUnavailable
from triggerhook.interfaces import MetricsSink
from triggerhook.metrics.influx import InfluxV1Sink, InfluxV2Sink
from triggerhook.runtime.points import Point
from triggerhook.wiring import sink_from_settings

_STALL_MAX_S = 10.0  # a stalled answer is released at teardown at the latest

POINTS = [
    Point(
        "triggerhook", {"instance": "i-1", "host": "h"}, {"fired": 3, "lateness_p99_ms": 1.5}, 1_000
    ),
    Point("triggerhook_http", {"instance": "i-1", "host": "h"}, {"requests_2xx": 7}, 2_000),
]
LINES = (
    b"triggerhook,host=h,instance=i-1 fired=3i,lateness_p99_ms=1.5 1000\n"
    b"triggerhook_http,host=h,instance=i-1 requests_2xx=7i 2000"
)


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: bytes


class StandIn:
    """The stand-in InfluxDB: answers ``status`` with ``error`` as InfluxDB's error
    body (2.x: ``{"code", "message"}``; 1.x paths: ``{"error"}``), or stalls."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.status = 204
        self.error = ""
        self.stall = False
        self.release = threading.Event()
        self._lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as InfluxDB

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                stand_in.record(self, self.rfile.read(length))
                if stand_in.stall:
                    stand_in.release.wait(_STALL_MAX_S)
                    return
                self._answer()

            def _answer(self) -> None:
                body = b""
                if stand_in.status >= 300:
                    if self.path.startswith("/api/v2/"):
                        body = json.dumps({"code": "x", "message": stand_in.error}).encode()
                    else:
                        body = json.dumps({"error": stand_in.error}).encode()
                self.send_response(stand_in.status)
                self.send_header("Content-Length", str(len(body)))
                if body:
                    self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # the test output stays readable

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},  # shutdown() waits up to this long
            name="influx-stand-in",
            daemon=True,
        )

    def record(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        parts = urlsplit(handler.path)
        recorded = Recorded(
            method=handler.command,
            path=parts.path,
            query=parse_qs(parts.query, keep_blank_values=True),
            headers={name.lower(): value for name, value in handler.headers.items()},
            body=body,
        )
        with self._lock:
            self.requests.append(recorded)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(_STALL_MAX_S)


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    server = StandIn()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def v2_sink(stand_in: StandIn) -> Iterator[InfluxV2Sink]:
    sink = InfluxV2Sink(stand_in.url, "my-org", "my-bucket", "s3cret", timeout_s=0.5)
    try:
        yield sink
    finally:
        sink.close()


def _make_sink(kind: str, url: str, timeout_s: float) -> MetricsSink:
    if kind == "v1":
        return InfluxV1Sink(url, "metrics", timeout_s=timeout_s)
    return InfluxV2Sink(url, "my-org", "my-bucket", "s3cret", timeout_s=timeout_s)


# -- the request ------------------------------------------------------------------------


def test_v2_write_request(stand_in: StandIn, v2_sink: InfluxV2Sink) -> None:
    v2_sink.write(POINTS)

    assert len(stand_in.requests) == 1
    request = stand_in.requests[0]
    assert (request.method, request.path) == ("POST", "/api/v2/write")
    assert request.query == {"org": ["my-org"], "bucket": ["my-bucket"], "precision": ["ms"]}
    assert request.headers["authorization"] == "Token s3cret"
    assert request.headers["content-type"].startswith("text/plain")
    assert request.body == LINES


def test_v2_without_token_and_org(stand_in: StandIn) -> None:
    # InfluxDB 3.x ignores org; a server without authentication needs no token.
    sink = InfluxV2Sink(stand_in.url + "/", "", "bucket", "", timeout_s=0.5)
    try:
        sink.write(POINTS[:1])
    finally:
        sink.close()
    request = stand_in.requests[0]
    assert request.path == "/api/v2/write"
    assert request.query["bucket"] == ["bucket"]
    assert request.query.get("org", [""]) == [""]
    assert "authorization" not in request.headers


def test_v2_no_request_without_points(stand_in: StandIn, v2_sink: InfluxV2Sink) -> None:
    v2_sink.write([])
    v2_sink.write([Point("m", {}, {"f": float("nan")}, 1)])  # left out: nothing to send
    assert stand_in.requests == []


def test_v1_write_request(stand_in: StandIn) -> None:
    sink = InfluxV1Sink(stand_in.url, "metrics", "autogen", "writer", "pw", timeout_s=0.5)
    try:
        sink.write(POINTS)
    finally:
        sink.close()
    request = stand_in.requests[0]
    assert (request.method, request.path) == ("POST", "/write")
    assert request.query == {"db": ["metrics"], "precision": ["ms"], "rp": ["autogen"]}
    assert request.headers["authorization"] == "Basic d3JpdGVyOnB3"  # writer:pw
    assert request.body == LINES


# -- answers -> errors ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["v1", "v2"])
@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        (204, "", None),
        (200, "", None),
        (400, "unable to parse 'x': missing fields", MetricsRejected),
        (401, "unauthorized access", MetricsRejected),
        (403, "insufficient permissions for write", MetricsRejected),
        (404, 'bucket "my-bucket" not found', MetricsRejected),
        (413, "request too large", MetricsRejected),
        (408, "request timeout", MetricsUnavailable),
        (429, "too many requests", MetricsUnavailable),
        (500, "internal error", MetricsUnavailable),
        (503, "service unavailable: starting up", MetricsUnavailable),
    ],
)
def test_status_mapping(
    stand_in: StandIn,
    kind: str,
    status: int,
    error: str,
    expected: type[Exception] | None,
) -> None:
    stand_in.status, stand_in.error = status, error
    sink = _make_sink(kind, stand_in.url, 0.5)
    try:
        if expected is None:
            sink.write(POINTS)
        else:
            with pytest.raises(expected) as raised:
                sink.write(POINTS)
            # The server's own words reach the log.
            assert f"HTTP {status}: {error}" in str(raised.value)
    finally:
        sink.close()
    assert len(stand_in.requests) == 1


@pytest.mark.parametrize("kind", ["v1", "v2"])
def test_stalled_server_times_out_as_unavailable(stand_in: StandIn, kind: str) -> None:
    stand_in.stall = True
    timeout_s = 0.4
    sink = _make_sink(kind, stand_in.url, timeout_s)
    try:
        started = time.monotonic()
        with pytest.raises(MetricsUnavailable, match=r"(?i)timed? ?out"):
            sink.write(POINTS)
        elapsed_s = time.monotonic() - started
    finally:
        sink.close()
    assert timeout_s * 0.9 <= elapsed_s < timeout_s + 1.0, elapsed_s
    assert len(stand_in.requests) == 1  # no retry inside the sink


@pytest.mark.parametrize("kind", ["v1", "v2"])
def test_unreachable_server_is_unavailable_at_once(kind: str) -> None:
    sink = _make_sink(kind, f"http://127.0.0.1:{closed_port()}", 2.0)
    try:
        started = time.monotonic()
        with pytest.raises(MetricsUnavailable, match=r"(?i)refused"):
            sink.write(POINTS)
        assert time.monotonic() - started < 2.0
    finally:
        sink.close()


def test_v2_keeps_working_after_a_failed_write(stand_in: StandIn, v2_sink: InfluxV2Sink) -> None:
    stand_in.status, stand_in.error = 503, "down for a moment"
    with pytest.raises(MetricsUnavailable):
        v2_sink.write(POINTS)
    stand_in.status = 204
    v2_sink.write(POINTS)
    assert [r.body for r in stand_in.requests] == [LINES, LINES]


# -- sink_from_settings -----------------------------------------------------------------


def test_no_sink_without_metrics_url() -> None:
    assert sink_from_settings(Settings()) is None


def test_v1_sink_from_settings(stand_in: StandIn) -> None:
    settings = Settings(
        metrics_url=stand_in.url,
        metrics_database="tele",
        metrics_retention_policy="week",
        metrics_username="u",
        metrics_password="p",
    )
    sink = sink_from_settings(settings)
    assert isinstance(sink, InfluxV1Sink)
    try:
        sink.write(POINTS)
    finally:
        sink.close()
    request = stand_in.requests[0]
    assert request.query == {"db": ["tele"], "precision": ["ms"], "rp": ["week"]}
    assert request.headers["authorization"] == "Basic dTpw"  # u:p


def test_v2_sink_from_settings_respects_metrics_timeout_ms(stand_in: StandIn) -> None:
    settings = Settings(
        metrics_url=stand_in.url,
        metrics_influx_version=2,
        metrics_org="o",
        metrics_bucket="b",
        metrics_token="t",
        metrics_timeout_ms=300,
    )
    sink = sink_from_settings(settings)
    assert isinstance(sink, InfluxV2Sink)
    stand_in.stall = True
    try:
        started = time.monotonic()
        with pytest.raises(MetricsUnavailable):
            sink.write(POINTS)
        assert time.monotonic() - started < 0.3 + 1.0
    finally:
        sink.close()
    request = stand_in.requests[0]
    assert request.query == {"org": ["o"], "bucket": ["b"], "precision": ["ms"]}
    assert request.headers["authorization"] == "Token t"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"metrics_url": "127.0.0.1:8086"}, "metrics_url"),
        ({"metrics_url": "ftp://host"}, "metrics_url"),
        ({"metrics_url": "http://host/?db=x"}, "metrics_url"),
        ({"metrics_url": "http://host", "metrics_database": ""}, "metrics_database"),
        (
            {"metrics_url": "http://host", "metrics_influx_version": 2, "metrics_bucket": ""},
            "metrics_bucket",
        ),
    ],
)
def test_bad_settings_name_the_field(overrides: dict[str, object], field: str) -> None:
    settings = Settings(**overrides)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=f"^{field}: "):
        sink_from_settings(settings)
