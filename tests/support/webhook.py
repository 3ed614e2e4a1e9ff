"""A webhook receiver for tests: a local HTTP server (stdlib, in a thread)
that records every POST and answers with the status the test sets; and
:class:`HostileWebhook`, one that answers too slowly or too much.

:meth:`WebhookServer.wait_for` waits on a condition for the n-th request,
with a deadline. Header values are given back as the UTF-8 text they were
sent as (http.server reads them as ISO-8859-1).
"""

from __future__ import annotations

import contextlib
import functools
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Self


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes


class _Recorder:
    """What both receivers share: the requests recorded (under ``_cond``),
    waiting for them with a deadline, their URL, and use as a context manager."""

    port: int

    def __init__(self) -> None:
        self._received: list[Received] = []
        self._cond = threading.Condition()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def record(self, received: Received) -> None:
        with self._cond:
            self._received.append(received)
            self._cond.notify_all()

    @property
    def received(self) -> list[Received]:
        with self._cond:
            return list(self._received)

    def wait_for(self, count: int, timeout_s: float) -> list[Received]:
        """The first ``count`` requests, once they came; AssertionError at the deadline."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self._received) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"{len(self._received)} webhook requests within {timeout_s:.1f}s, "
                        f"expected {count}: {self._received!r}"
                    )
                self._cond.wait(left)
            return self._received[:count]

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class WebhookServer(_Recorder):
    """Answers ``script``'s statuses first, one a request, then ``status``;
    each after ``delay_s`` (a slow receiver; cut short by :meth:`stop`)."""

    def __init__(
        self, status: int = 204, script: tuple[int, ...] = (), delay_s: float = 0.0
    ) -> None:
        super().__init__()
        self.status = status  # the answer to every request (settable meanwhile)
        self.script = list(script)
        self.delay_s = delay_s
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a real webhook receiver

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {
                    name.lower(): value.encode("iso-8859-1").decode("utf-8", "replace")
                    for name, value in self.headers.items()
                }
                server.record(Received(self.path, headers, body))
                server._stopping.wait(server.delay_s)
                self.send_response(server.next_status())
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                """Silent: the test's output stays readable."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True  # a keep-alive connection ends with the test
        self.port = int(self._server.server_address[1])
        # serve_forever's poll interval: how long shutdown() may wait.
        serve = functools.partial(self._server.serve_forever, 0.02)
        self._thread = threading.Thread(target=serve, name="webhook-receiver", daemon=True)

    def next_status(self) -> int:
        with self._cond:
            return self.script.pop(0) if self.script else self.status

    def wrap(self, tls: ssl.SSLContext) -> None:
        """Serve https with ``tls`` (call before the first request)."""
        self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)


class HostileWebhook(_Recorder):
    """A webhook that reads each request whole, records it (as
    :class:`WebhookServer` does), then misbehaves with the answer:

    * ``trickle``: ``200 OK`` one byte every ``every_s`` seconds, never done
      (a per-read timeout never fires on it);
    * ``endless``: the head of a ``status`` answer with a chunked body that
      never ends, sent as fast as the client reads it.

    Each connection has a thread of its own; they all end at :meth:`stop`.
    :attr:`sent_bytes` counts the answer bytes the client took, and
    :meth:`wait_for` waits for requests as :class:`WebhookServer` does.
    """

    def __init__(self, mode: str, every_s: float = 2.0, status: int = 200) -> None:
        if mode not in ("trickle", "endless"):
            raise ValueError(f"unknown mode {mode!r}")
        super().__init__()
        self.mode, self.every_s, self.status = mode, every_s, status
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._stopping = threading.Event()
        self.sent_bytes = 0
        self.hung_up = 0  # connections the client closed while an answer was going out
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []  # shut at stop(): a blocked send or read ends

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed by stop()
                return
            with self._cond:
                self._conns.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                while not self._stopping.is_set() and self._read_request(conn):
                    self._answer(conn)
            except OSError:
                with self._cond:
                    self.hung_up += 1
                    self._cond.notify_all()

    def _read_request(self, conn: socket.socket) -> bool:
        """One request, recorded; False at the end of the connection."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("utf-8", "replace").split("\r\n")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            body += chunk
        self.record(Received(lines[0].split(" ")[1], headers, body[:length]))
        return True

    def _answer(self, conn: socket.socket) -> None:
        if self.mode == "trickle":
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n":
                if self._stopping.wait(self.every_s):
                    return
                self._send(conn, bytes([byte]))
            self._stopping.wait()  # the head never ends
            return
        self._send(conn, f"HTTP/1.1 {self.status} X\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        chunk = b"4000\r\n" + b"x" * 0x4000 + b"\r\n"
        while not self._stopping.is_set():
            self._send(conn, chunk)

    def _send(self, conn: socket.socket, data: bytes) -> None:
        conn.sendall(data)
        with self._cond:
            self.sent_bytes += len(data)

    def start(self) -> Self:
        thread = threading.Thread(target=self._accept, name="hostile-webhook", daemon=True)
        self._threads.append(thread)
        thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._cond:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in list(self._threads):
            thread.join(5.0)
