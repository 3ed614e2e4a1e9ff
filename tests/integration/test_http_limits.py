"""Connection and body limits of the HTTP API, against real ``triggerhook run``
daemons: slow request heads and bodies are cut off, open connections are capped,
and a chunked body over the limit is refused as soon as it passes the limit.

The clients here are raw sockets: they send exactly the bytes a test needs,
as slowly as it needs, which an HTTP client library would not.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from support.http import Api, api_daemon
from support.waiting import wait_for, wait_until

HEADER_TIMEOUT_S = 1
BODY_TIMEOUT_S = 2
# Longer than the header timeout in the main daemon, so the header timeout is
# what cuts slow heads there; the keep-alive test has a daemon of its own.
KEEPALIVE_TIMEOUT_S = 4
MAX_BODY = 16 * 1024
MAX_CONNECTIONS = 8
# The sweep runs every second: a connection is cut within its timeout plus this.
SLACK_S = 3.0
REFUSED_LINE = "(http_max_connections)"  # in the daemon's line about the cap
HEAD = "POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


@pytest.fixture(scope="module")
def api(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    with api_daemon(
        mysql_url,
        amqp_url,
        http_header_timeout_s=HEADER_TIMEOUT_S,
        http_body_timeout_s=BODY_TIMEOUT_S,
        http_keepalive_timeout_s=KEEPALIVE_TIMEOUT_S,
        http_max_body_bytes=MAX_BODY,
    ) as served:
        yield served
        assert served.daemon.terminate() == 0, served.daemon.tail()
        assert served.daemon.count("Traceback") == 0, served.daemon.tail()


def connect(api: Api) -> socket.socket:
    port = int(api.url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def closed_by_server(sock: socket.socket, timeout_s: float) -> bytes | None:
    """Everything the server sent until it closed the connection, or None if it
    was still open after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    received = b""
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return None
        except ConnectionResetError:
            return received
        if not data:
            return received
        received += data
    return None


def first_answer(sock: socket.socket, timeout_s: float) -> tuple[bytes, float]:
    """The first bytes the server sends, and how long they took (AssertionError
    if none came within ``timeout_s``)."""
    started = time.monotonic()
    sock.settimeout(timeout_s)
    try:
        data = sock.recv(65536)
    except TimeoutError:
        raise AssertionError(f"no answer within {timeout_s}s") from None
    return data, time.monotonic() - started


def metric(api: Api, name: str) -> int:
    for line in httpx.get(f"{api.url}/metrics").text.splitlines():
        if line.startswith(f"triggerhook_{name}_total{{"):
            return int(float(line.rsplit(" ", 1)[1]))  # the text format writes 1.0
    raise AssertionError(f"no metric {name}")


class Trickler(threading.Thread):
    """Sends a request head one byte every ``interval_s``, never finishing it,
    and records when the server closed the connection."""

    def __init__(self, sock: socket.socket, interval_s: float) -> None:
        super().__init__(daemon=True)
        self._sock = sock
        self._interval_s = interval_s
        self._stop_event = threading.Event()
        self.closed_after_s: float | None = None

    def run(self) -> None:
        started = time.monotonic()
        data = (HEAD + "X-Padding: " + "a" * 10_000).encode()
        with contextlib.suppress(OSError):
            for byte in data:
                if self._stop_event.wait(self._interval_s):
                    return
                self._sock.sendall(bytes([byte]))
        self.closed_after_s = time.monotonic() - started

    def stop(self) -> None:
        self._stop_event.set()


def test_clients_trickling_a_request_head_are_disconnected(api: Api) -> None:
    mark = api.daemon.mark()
    before = metric(api, "http_header_timeouts")
    socks = [connect(api) for _ in range(20)]
    tricklers = [Trickler(sock, 0.2) for sock in socks]
    try:
        for trickler in tricklers:
            trickler.start()
        # Each keeps sending (its writes succeed) until the server closes it.
        wait_for(
            lambda: all(t.closed_after_s is not None for t in tricklers),
            HEADER_TIMEOUT_S + SLACK_S + 2,
            lambda: f"{sum(t.closed_after_s is None for t in tricklers)} still open",
        )
        assert all(
            t.closed_after_s is not None and t.closed_after_s < HEADER_TIMEOUT_S + SLACK_S
            for t in tricklers
        ), [t.closed_after_s for t in tricklers]
    finally:
        for trickler in tricklers:
            trickler.stop()
        for sock in socks:
            sock.close()
    assert metric(api, "http_header_timeouts") >= before + len(socks)
    line = api.daemon.wait_for_line("sent no complete request head", 5, start=mark)
    assert "WARNING" in line
    # Rate-limited: one line for the whole burst, not one per connection.
    assert api.daemon.count("sent no complete request head", mark) <= 2
    assert httpx.get(f"{api.url}/healthz").status_code == 200


def test_a_silent_connection_is_closed_too(api: Api) -> None:
    with connect(api) as sock:
        assert closed_by_server(sock, HEADER_TIMEOUT_S + SLACK_S) == b""


def test_a_slow_body_gets_408_and_the_connection_is_closed(api: Api) -> None:
    before = metric(api, "http_body_timeouts")
    with connect(api) as sock:
        sock.sendall(f"{HEAD}Content-Length: 100\r\n\r\n".encode() + b'{"delay": ')
        started = time.monotonic()
        answer = closed_by_server(sock, BODY_TIMEOUT_S + SLACK_S + 2)
        elapsed_s = time.monotonic() - started
    assert answer is not None, "still open"
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"Connection: close" in answer
    assert b'"request_timeout"' in answer
    assert BODY_TIMEOUT_S - 0.5 <= elapsed_s < BODY_TIMEOUT_S + SLACK_S, elapsed_s
    assert metric(api, "http_body_timeouts") == before + 1


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def test_a_chunked_body_over_the_limit_is_refused_before_it_ends(api: Api) -> None:
    with connect(api) as sock:
        sock.sendall(f"{HEAD}Transfer-Encoding: chunked\r\n\r\n".encode())
        piece = b" " * 4096
        for _ in range(MAX_BODY // len(piece) + 1):  # one piece past the limit
            sock.sendall(chunk(piece))
        # The body never ends: the answer comes from passing the limit, well
        # before the body timeout would answer 408.
        answer, elapsed_s = first_answer(sock, BODY_TIMEOUT_S + SLACK_S)
        assert answer.startswith(b"HTTP/1.1 413 "), answer
        assert elapsed_s < BODY_TIMEOUT_S, elapsed_s
        rest = closed_by_server(sock, SLACK_S + 2)  # then it closes the connection
        assert rest is not None, "still open after the 413"
    assert b"Connection: close" in answer + rest


@pytest.mark.parametrize(("extra", "status"), [(0, 201), (1, 413)])
def test_a_chunked_body_of_exactly_the_limit_is_read(api: Api, extra: int, status: int) -> None:
    body = json.dumps({"delay": 60, "payload": ""}).encode()
    body = body[:-2] + b"x" * (MAX_BODY - len(body) + extra) + body[-2:]
    assert len(body) == MAX_BODY + extra

    def pieces() -> Iterator[bytes]:  # no Content-Length: chunked
        for start in range(0, len(body), 5000):
            yield body[start : start + 5000]

    response = httpx.post(
        f"{api.url}/v1/tasks", content=pieces(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == status, response.text


# -- the connection cap: its own daemon, with the default (long) timeouts ----------------


@pytest.fixture(scope="module")
def capped(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    with api_daemon(mysql_url, amqp_url, http_max_connections=MAX_CONNECTIONS) as served:
        yield served
        assert served.daemon.terminate() == 0, served.daemon.tail()
        assert served.daemon.count("Traceback") == 0, served.daemon.tail()


def healthy(api: Api) -> bool:
    try:
        return httpx.get(f"{api.url}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_connections_over_the_cap_are_closed_at_once(capped: Api) -> None:
    mark = capped.daemon.mark()
    request = b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n"
    held = [connect(capped) for _ in range(MAX_CONNECTIONS)]
    try:
        # Each held connection is served: the daemon has accepted all of them.
        for sock in held:
            sock.sendall(request)
            sock.settimeout(5)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        for _ in range(3):
            with connect(capped) as extra:
                extra.sendall(request)
                assert closed_by_server(extra, 5) == b"", "served over the cap"
        assert not healthy(capped)
        line = capped.daemon.wait_for_line(REFUSED_LINE, 5, start=mark)
        assert "WARNING" in line and "http_max_connections" in line
        assert capped.daemon.count(REFUSED_LINE, mark) == 1  # rate-limited: one a burst
    finally:
        held.pop().close()
    # One slot free: a normal request is served again.
    wait_for(lambda: healthy(capped), 10, "no request served after a connection closed")
    for sock in held:
        sock.close()
    assert wait_until(lambda: metric(capped, "http_connections_refused") >= 4, 10)


# -- keep-alive: a daemon whose keep-alive timeout is shorter than its header timeout ------

SHORT_KEEPALIVE_S = 1


@pytest.fixture(scope="module")
def keepalive(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    with api_daemon(mysql_url, amqp_url, http_keepalive_timeout_s=SHORT_KEEPALIVE_S) as served:
        yield served
        assert served.daemon.terminate() == 0, served.daemon.tail()


def test_an_idle_keep_alive_connection_is_closed_and_a_busy_one_is_not(
    keepalive: Api,
) -> None:
    with connect(keepalive) as sock:
        request = b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n"
        # Requests arriving well within the timeout keep the connection open.
        for _ in range(4):
            sock.sendall(request)
            sock.settimeout(5)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
            time.sleep(SHORT_KEEPALIVE_S / 4)  # a client's pause between requests
        assert closed_by_server(sock, SHORT_KEEPALIVE_S + SLACK_S) == b""
