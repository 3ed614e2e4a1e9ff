"""Tests for tests/support/tcpproxy.py against a local echo server."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest
from support.tcpproxy import TcpProxy

TIMEOUT_S = 5.0


class _EchoHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        try:
            while data := sock.recv(65536):
                sock.sendall(data)
        except OSError:
            pass


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = _EchoServer(("127.0.0.1", 0), _EchoHandler)
    thread = threading.Thread(
        target=server.serve_forever, args=(0.05,), name="echo-server", daemon=True
    )
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT_S)


@pytest.fixture
def proxy(echo_port: int) -> Iterator[TcpProxy]:
    with TcpProxy("127.0.0.1", echo_port) as p:
        yield p


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)


def _recv_exactly(sock: socket.socket, n: int, timeout_s: float = TIMEOUT_S) -> bytes:
    deadline = time.monotonic() + timeout_s
    chunks: list[bytes] = []
    got = 0
    while got < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"received {got} of {n} bytes before the deadline")
        sock.settimeout(remaining)
        chunk = sock.recv(min(65536, n - got))
        if not chunk:
            raise EOFError(f"connection closed after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _assert_closed_by_peer(sock: socket.socket, timeout_s: float = TIMEOUT_S) -> None:
    """The peer closed the connection: recv returns b"" or fails, well before the deadline."""
    sock.settimeout(timeout_s)
    try:
        data = sock.recv(1)
    except TimeoutError:
        pytest.fail("connection still open after the deadline")
    except ConnectionError:
        return
    assert data == b""


def _assert_unreachable(port: int) -> None:
    """New connections are refused, or accepted and closed at once."""
    try:
        sock = _connect(port)
    except ConnectionRefusedError:
        return
    with sock:
        _assert_closed_by_peer(sock)


def _roundtrip(port: int, payload: bytes) -> None:
    with _connect(port) as sock:
        sock.sendall(payload)
        assert _recv_exactly(sock, len(payload)) == payload


def test_forwards_bytes(proxy: TcpProxy) -> None:
    with _connect(proxy.port) as sock:
        for message in (b"hello", b"x", b"\x00\xff" * 100):
            sock.sendall(message)
            assert _recv_exactly(sock, len(message)) == message
        assert proxy.active_connections == 1


def test_forwards_large_payload_both_ways_at_once(proxy: TcpProxy) -> None:
    payload = bytes(range(256)) * 8192  # 2 MiB, far more than the socket buffers
    with _connect(proxy.port) as sock:
        sender = threading.Thread(target=sock.sendall, args=(payload,), daemon=True)
        sender.start()
        assert _recv_exactly(sock, len(payload), timeout_s=30) == payload
        sender.join(TIMEOUT_S)
        assert not sender.is_alive()


def test_half_close_is_forwarded(proxy: TcpProxy) -> None:
    with _connect(proxy.port) as sock:
        sock.sendall(b"last words")
        sock.shutdown(socket.SHUT_WR)
        assert _recv_exactly(sock, 10) == b"last words"
        _assert_closed_by_peer(sock)  # the echo server saw EOF and closed


def test_concurrent_connections(proxy: TcpProxy) -> None:
    socks = [_connect(proxy.port) for _ in range(5)]
    try:
        for i, sock in enumerate(socks):
            sock.sendall(f"conn {i}".encode())
        for i, sock in enumerate(socks):
            assert _recv_exactly(sock, len(f"conn {i}")) == f"conn {i}".encode()
    finally:
        for sock in socks:
            sock.close()


def test_cut_breaks_open_connections_and_refuses_new_ones(proxy: TcpProxy) -> None:
    with _connect(proxy.port) as a, _connect(proxy.port) as b:
        for sock in (a, b):
            sock.sendall(b"ping")
            assert _recv_exactly(sock, 4) == b"ping"

        proxy.cut()

        assert proxy.is_cut
        assert proxy.active_connections == 0
        _assert_closed_by_peer(a)
        _assert_closed_by_peer(b)
        _assert_unreachable(proxy.port)
        proxy.cut()  # idempotent
        _assert_unreachable(proxy.port)


def test_restore_forwards_again_on_the_same_port(proxy: TcpProxy) -> None:
    port = proxy.port
    _roundtrip(port, b"before")
    proxy.cut()
    _assert_unreachable(port)

    proxy.restore()

    assert proxy.port == port
    assert not proxy.is_cut
    _roundtrip(port, b"after")
    proxy.restore()  # idempotent
    _roundtrip(port, b"again")

    for _ in range(3):  # repeated flapping
        proxy.cut()
        _assert_unreachable(port)
        proxy.restore()
        _roundtrip(port, b"flap")


def test_upstream_down_closes_client(echo_port: int) -> None:
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        dead_port = int(s.getsockname()[1])
    with TcpProxy("127.0.0.1", dead_port) as p:
        _assert_unreachable(p.port)


def _proxy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tcpproxy-")]


def test_stop_closes_everything_and_joins_threads(echo_port: int) -> None:
    before = _proxy_threads()
    p = TcpProxy("127.0.0.1", echo_port)
    p.start()
    port = p.port
    with _connect(port) as sock:
        sock.sendall(b"hi")
        assert _recv_exactly(sock, 2) == b"hi"
        assert len(_proxy_threads()) > len(before)

        p.stop()

        _assert_closed_by_peer(sock)
    assert _proxy_threads() == before
    assert p.active_connections == 0
    with pytest.raises(ConnectionRefusedError):
        _connect(port).close()
    p.stop()  # idempotent
    with pytest.raises(RuntimeError):
        p.restore()


def test_port_before_start_raises() -> None:
    p = TcpProxy("127.0.0.1", 9)
    with pytest.raises(RuntimeError):
        _ = p.port
    with pytest.raises(RuntimeError):
        p.cut()
    p.stop()
