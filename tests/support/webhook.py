"""A webhook receiver for tests: a local HTTP server (stdlib, in a thread)
that records every POST and answers with the status the test sets.

:meth:`WebhookServer.wait_for` waits on a condition for the n-th request,
with a deadline. Header values are given back as the UTF-8 text they were
sent as (http.server reads them as ISO-8859-1).
"""

from __future__ import annotations

import functools
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


class WebhookServer:
    def __init__(self, status: int = 204) -> None:
        self.status = status  # the answer to every request (settable meanwhile)
        self._received: list[Received] = []
        self._cond = threading.Condition()
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
                self.send_response(server.status)
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
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
