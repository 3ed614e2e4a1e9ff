"""A small threaded TCP proxy for fault-injection tests.

Point the code under test at ``127.0.0.1:proxy.port`` instead of the real server
(MariaDB, RabbitMQ), then:

* :meth:`TcpProxy.cut` closes every proxied connection at once (both peers see
  EOF) and closes the listening socket, so new connections are refused: the
  upstream looks unreachable.
* :meth:`TcpProxy.restore` listens again, on the same port, and forwards again.
* :meth:`TcpProxy.hold` stops forwarding without closing anything: connections
  stay open, bytes sent meanwhile wait (in the proxy and the kernel's buffers)
  until :meth:`TcpProxy.flow`, which forwards them in order (a stalled network
  path: a peer sees its writes accepted and nothing come back).
* :meth:`TcpProxy.lose_answer_to` lets the next request holding some bytes
  through, drops the server's answer and closes that connection: the server
  did the work (a COMMIT went through), the client sees its connection lost.

One acceptor thread (selector over the listening socket and a wake-up socket)
and one thread per direction per connection, blocking in ``recv``/``sendall``.
Threads are woken with ``shutdown()``, never by polling, and are all joined by
:meth:`cut` (connection threads) and :meth:`stop` (everything).
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit, urlunsplit

_BUFSIZE = 65536
_JOIN_TIMEOUT_S = 10.0


def _shutdown(sock: socket.socket, how: int) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(how)


class _AnswerLoss:
    """:meth:`TcpProxy.lose_answer_to`'s trigger, shared by every link: once
    armed with a marker, the first request holding it takes it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marker: bytes | None = None
        self.answered = threading.Event()

    def arm(self, marker: bytes) -> threading.Event:
        with self._lock:
            self._marker = marker
            self.answered = threading.Event()
            return self.answered

    def take(self, data: bytes) -> threading.Event | None:
        """For the first request holding the marker: the event to set once its
        answer was dropped; else None."""
        marker = self._marker
        if marker is None or marker not in data:
            return None
        with self._lock:
            if self._marker is None:
                return None
            self._marker = None
            return self.answered


class _Link:
    """One proxied connection: client <-> upstream, one pump thread per direction."""

    def __init__(
        self,
        client: socket.socket,
        upstream: socket.socket,
        name: str,
        on_finished: Callable[[_Link], None],
        flowing: threading.Event | None = None,
        loss: _AnswerLoss | None = None,
    ) -> None:
        self._client = client
        self._upstream = upstream
        self._on_finished = on_finished
        self._flowing = flowing  # cleared: hold what was read (TcpProxy.hold)
        self._loss = loss
        self._dropping: threading.Event | None = None  # set: drop the next answer, then abort
        self._lock = threading.Lock()
        self._pumps_running = 2
        self._closed = False
        self._aborted = threading.Event()
        self._threads = [
            threading.Thread(
                target=self._pump, args=(client, upstream), name=f"{name}-up", daemon=True
            ),
            threading.Thread(
                target=self._pump, args=(upstream, client), name=f"{name}-down", daemon=True
            ),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(_BUFSIZE):
                self._wait_flowing()
                if not self._forward(src, dst, data):
                    self.abort()  # an answer dropped (lose_answer_to)
                    return
        except OSError:
            # Reset, broken pipe, or our own abort(): tear down both directions.
            self.abort()
        else:
            # Orderly EOF from src: pass the half-close on, keep the other direction.
            with self._lock:
                if not self._closed:
                    _shutdown(dst, socket.SHUT_WR)
        finally:
            self._pump_done()

    def _forward(self, src: socket.socket, dst: socket.socket, data: bytes) -> bool:
        """Send ``data`` on; False for an answer to drop."""
        if self._dropping is not None and src is self._upstream:
            self._dropping.set()
            return False
        if self._loss is not None and src is self._client:
            # Before the request goes on: its answer follows it.
            self._dropping = self._dropping or self._loss.take(data)
        dst.sendall(data)
        return True

    def _wait_flowing(self) -> None:
        """Block while the proxy holds traffic; OSError once the link is aborted."""
        if self._flowing is None:
            return
        while not self._flowing.wait(0.05):
            if self._aborted.is_set():
                raise OSError("link aborted while held")

    def _pump_done(self) -> None:
        with self._lock:
            self._pumps_running -= 1
            if self._pumps_running > 0:
                return
            self._closed = True
            self._client.close()
            self._upstream.close()
        self._on_finished(self)

    def abort(self) -> None:
        """Close both sides now: wakes both pumps (recv returns b"", sendall fails)."""
        self._aborted.set()
        with self._lock:
            if not self._closed:
                _shutdown(self._client, socket.SHUT_RDWR)
                _shutdown(self._upstream, socket.SHUT_RDWR)

    def upstream_port(self) -> int | None:
        """The local port of the connection to the upstream server (None once closed)."""
        with contextlib.suppress(OSError):
            return int(self._upstream.getsockname()[1])
        return None

    def join(self, timeout_s: float) -> None:
        for thread in self._threads:
            thread.join(timeout_s)


class _Acceptor:
    """Owns a listening socket and the thread that accepts on it."""

    def __init__(
        self, listener: socket.socket, on_accept: Callable[[socket.socket], None], name: str
    ) -> None:
        self._listener = listener
        self._on_accept = on_accept
        self._wake_r, self._wake_w = socket.socketpair()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._stopping.is_set():
                for key, _ in selector.select(timeout=1.0):
                    if key.fileobj is self._wake_r or self._stopping.is_set():
                        return
                    try:
                        client, _ = self._listener.accept()
                    except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                        continue
                    self._on_accept(client)

    def close(self) -> None:
        """Stop accepting and close the listening socket (new connects are refused)."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(_JOIN_TIMEOUT_S)
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()


class TcpProxy:
    """Forward TCP connections from ``listen_host:port`` to ``target_host:target_port``.

    Usable as a context manager (``start()`` on enter, ``stop()`` on exit).
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        listen_host: str = "127.0.0.1",
        *,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.listen_host = listen_host
        self._connect_timeout_s = connect_timeout_s
        self._port: int | None = None
        self._state_lock = threading.Lock()  # serialises start/cut/restore/stop
        self._links_lock = threading.Lock()
        self._links: set[_Link] = set()
        self._acceptor: _Acceptor | None = None
        self._stopped = False
        self._counter = 0
        self._flowing = threading.Event()
        self._flowing.set()
        self._loss = _AnswerLoss()

    # -- public API --------------------------------------------------------------

    @property
    def port(self) -> int:
        """The listening port (stable across cut()/restore())."""
        if self._port is None:
            raise RuntimeError("TcpProxy.start() has not been called")
        return self._port

    @property
    def is_held(self) -> bool:
        return not self._flowing.is_set()

    @property
    def is_cut(self) -> bool:
        return self._port is not None and self._acceptor is None and not self._stopped

    @property
    def active_connections(self) -> int:
        with self._links_lock:
            return len(self._links)

    @property
    def accepted(self) -> int:
        """Connections forwarded since start."""
        return self._counter

    def upstream_ports(self) -> set[int]:
        """Local ports of the proxy's open connections to the upstream server
        (a MariaDB session's ``host`` is ``127.0.0.1:<one of these>``)."""
        with self._links_lock:
            links = list(self._links)
        return {port for link in links if (port := link.upstream_port()) is not None}

    def start(self) -> None:
        """Bind an ephemeral port on listen_host and start forwarding."""
        with self._state_lock:
            if self._port is not None or self._stopped:
                raise RuntimeError("TcpProxy can only be started once")
            listener = self._listen(0)
            self._port = int(listener.getsockname()[1])
            self._start_acceptor(listener)

    def cut(self) -> None:
        """Close all current connections and refuse new ones, until restore()."""
        with self._state_lock:
            self._require_started()
            if self._acceptor is not None:
                self._acceptor.close()
                self._acceptor = None
            self._close_links()

    def restore(self) -> None:
        """Listen on the same port again and forward new connections."""
        with self._state_lock:
            self._require_started()
            if self._acceptor is None:
                self._start_acceptor(self._listen(self.port))

    def hold(self) -> None:
        """Stop forwarding (both directions, every connection, new ones too)
        without closing anything, until :meth:`flow`."""
        self._flowing.clear()

    def flow(self) -> None:
        """Forward again, first what was held, in order."""
        self._flowing.set()

    def lose_answer_to(self, marker: bytes) -> threading.Event:
        """Let the next request holding ``marker`` (on any connection) reach
        the server, drop the server's answer to it and close that connection.
        The event is set once the answer came (and was dropped)."""
        return self._loss.arm(marker)

    def stop(self) -> None:
        """Close everything and join all threads. Idempotent."""
        with self._state_lock:
            if self._stopped:
                return
            self._stopped = True
            if self._acceptor is not None:
                self._acceptor.close()
                self._acceptor = None
            self._close_links()

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

    # -- internals ---------------------------------------------------------------

    def _require_started(self) -> None:
        if self._port is None:
            raise RuntimeError("TcpProxy.start() has not been called")
        if self._stopped:
            raise RuntimeError("TcpProxy has been stopped")

    def _listen(self, port: int) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.listen_host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.listen_host, port))
            listener.listen(128)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        return listener

    def _start_acceptor(self, listener: socket.socket) -> None:
        self._acceptor = _Acceptor(listener, self._on_accept, f"tcpproxy-{self.port}-accept")
        self._acceptor.start()

    def _close_links(self) -> None:
        with self._links_lock:
            links = list(self._links)
        for link in links:
            link.abort()
        for link in links:
            link.join(_JOIN_TIMEOUT_S)

    def _on_accept(self, client: socket.socket) -> None:
        """Called on the acceptor thread for each new client connection."""
        client.setblocking(True)
        try:
            upstream = socket.create_connection(
                (self.target_host, self.target_port), timeout=self._connect_timeout_s
            )
        except OSError:
            client.close()  # upstream down: the client sees its connection closed
            return
        upstream.settimeout(None)
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._counter += 1
        name = f"tcpproxy-{self.port}-conn{self._counter}"
        link = _Link(client, upstream, name, self._forget, self._flowing, self._loss)
        with self._links_lock:
            self._links.add(link)
        link.start()

    def _forget(self, link: _Link) -> None:
        with self._links_lock:
            self._links.discard(link)


_DEFAULT_PORTS = {"mysql+pymysql": 3306, "mysql+mysqldb": 3306, "mysql": 3306, "amqp": 5672}


@contextlib.contextmanager
def proxied(url: str) -> Iterator[tuple[TcpProxy, str]]:
    """A proxy in front of the server ``url`` names, and ``url`` through it."""
    target = urlsplit(url)
    port = target.port or _DEFAULT_PORTS[target.scheme]
    with TcpProxy(target.hostname or "127.0.0.1", port) as proxy:
        yield proxy, via_proxy(url, proxy.port)


def via_proxy(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the local proxy's (credentials kept)."""
    parts = urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = f"{credentials}@127.0.0.1:{port}" if credentials else f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=netloc))
