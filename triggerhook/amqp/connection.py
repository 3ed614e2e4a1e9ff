"""The one pika connection loop, shared by the publisher and the command consumer.

:class:`ConnectionLoop` owns one ``SelectConnection`` at a time on its owner's
thread (a :class:`~triggerhook.runtime.worker.Worker`): it connects, serves the
I/O loop until the connection ends, tells the owner to forget its per-connection
state, and reconnects after the owner's back-off (the one
:class:`~triggerhook.retry.Backoff`, through :meth:`Worker.back_off`). Other
threads reach the I/O thread only through :meth:`ConnectionLoop.call_soon`.

The broker URLs (``amqp_url``: one, or several nodes of a RabbitMQ cluster)
are parsed once, by :func:`amqp_parameters`, where a process is wired; the
loop is handed the parsed nodes. It connects to the first; whenever a
connection ends or cannot be made it moves on to the next node (round robin),
at once while some node of the round is untried, after the back-off once all
of them failed in a row.

The few private pika attributes the publisher relies on are reached only
through the adapters at the end of this module, each naming the pika version
it was checked against (``constraints.txt``; ``tests/unit/test_private_apis.py``
fails when one disappears).
"""

from __future__ import annotations

import logging
import re
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import pika
import pika.exceptions
from pika.adapters.utils.io_services_utils import _AsyncPlaintextTransport as _PlaintextTransport

from triggerhook.errors import BrokerUnavailable, ConfigError
from triggerhook.runtime.worker import BEAT_S, Worker

# pika.URLParameters (pika has no type hints: to mypy this is Any).
AmqpParameters: TypeAlias = pika.URLParameters
# The nodes a process may connect to, in the order they are tried.
AmqpNodes: TypeAlias = tuple[AmqpParameters, ...]
_URL_SEPARATORS = re.compile(r"[\s,]+")  # a URL itself has neither (percent-encode them)
_MAX_NODES = 16


def amqp_parameters(urls: str) -> AmqpNodes:
    """The connection parameters of ``amqp_url``: one URL, or several
    separated by spaces or commas (the nodes of a cluster, tried in that
    order); :class:`ConfigError` naming the bad one if any is malformed.

    pika copies them into every connection it makes, so one parsed object
    per node serves every connection of a process.
    """
    given = [url for url in _URL_SEPARATORS.split(urls) if url]
    if not given:
        raise ConfigError("amqp_url: give at least one amqp:// or amqps:// URL")
    if len(given) > _MAX_NODES:
        raise ConfigError(f"amqp_url: at most {_MAX_NODES} URLs")
    return tuple(_node(url, index, len(given)) for index, url in enumerate(given))


def _node(url: str, index: int, count: int) -> AmqpParameters:
    where = f"amqp_url (URL {index + 1} of {count})" if count > 1 else "amqp_url"
    if not url.startswith(("amqp://", "amqps://")):
        raise ConfigError(f"{where}: must start with amqp:// or amqps://")
    try:
        params = pika.URLParameters(url)
    except Exception as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    params.connection_attempts = 1
    params.socket_timeout = 5
    params.blocked_connection_timeout = 30
    return params


def node_name(params: AmqpParameters) -> str:
    """``host:port`` of a node, for logs (never its credentials)."""
    return f"{params.host}:{params.port}"


def close_connection(conn: pika.SelectConnection) -> None:
    """Close a ``SelectConnection`` from its I/O thread, in whatever state it is.

    One still connecting is not closed but its loop stopped: pika cannot abort
    its own handshake cleanly (closing then fails an assertion inside pika's
    connection workflow, which would kill the thread); the socket goes with
    the connection object.
    """
    if conn.is_closing or conn.is_closed:
        return
    if not conn.is_open:
        conn.ioloop.stop()
        return
    try:
        conn.close()
    except pika.exceptions.ConnectionWrongStateError:
        conn.ioloop.stop()


class ConnectionLoop:
    """Connect, serve, reconnect: one ``SelectConnection`` at a time.

    ``on_open(conn)`` runs on the I/O thread once a connection is open (the
    owner opens its channels); ``on_reset()`` runs on the owner's thread after
    each connection ended, before the next one is made (the owner drops what
    belonged to that connection). ``prefix`` starts the owner's log lines
    (``""`` for none), written to the owner's ``logger``.
    """

    __slots__ = (
        "_closed_msg",
        "_conn",
        "_failed_in_row",
        "_log",
        "_next",
        "_nodes",
        "_on_open",
        "_on_reset",
        "_open_error_msg",
        "_owner",
        "_what",
    )

    def __init__(
        self,
        nodes: AmqpNodes,
        owner: Worker,
        what: str,
        on_open: Callable[[pika.SelectConnection], None],
        on_reset: Callable[[], None],
        logger: logging.Logger,
        prefix: str = "",
    ) -> None:
        self._nodes = nodes
        self._next = 0  # index of the node the next connection goes to
        self._failed_in_row = 0  # connections ended or not made since one opened
        self._owner = owner
        self._what = what  # names the back-off's log lines: "<what> failed (attempt n) ..."
        self._on_open = on_open
        self._on_reset = on_reset
        self._log = logger
        self._open_error_msg = f"{prefix} cannot connect" if prefix else "cannot connect"
        self._open_error_msg += " to RabbitMQ at %s: %s"
        self._closed_msg = f"{prefix}: RabbitMQ" if prefix else "RabbitMQ"
        self._closed_msg += " connection closed (%s): %s"
        # Written by the owner's thread only; read by any (a reference read is atomic).
        self._conn: pika.SelectConnection | None = None

    @property
    def connection(self) -> pika.SelectConnection | None:
        """The current connection (open or not), None between connections."""
        return self._conn

    # -- the owner's thread ---------------------------------------------------

    def run(self, done: Callable[[], bool]) -> None:
        """Serve connections until ``done()`` is true after one ended (or after
        the back-off before the next)."""
        while True:
            self.serve()
            if done():
                return
            self._failed_in_row += 1
            if self._failed_in_row % len(self._nodes) == 0:  # every node failed: wait
                self._owner.back_off(BrokerUnavailable("connection to RabbitMQ lost"), self._what)
                if done():  # a stop came during the wait
                    return

    @property
    def node(self) -> str:
        """``host:port`` of the node the current (or next) connection is to."""
        return node_name(self._nodes[self._next])

    def serve(self) -> None:
        """Make one connection (to the next node) and serve its I/O loop until it stops."""
        params = self._nodes[self._next]
        conn = pika.SelectConnection(
            params,
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_open_error,
            on_close_callback=self._on_closed,
        )
        self._conn = conn
        self._beat(conn)
        try:
            conn.ioloop.start()
        finally:
            self._conn = None
            self._next = (self._next + 1) % len(self._nodes)
            self._on_reset()
            conn.ioloop.close()

    def _beat(self, conn: pika.SelectConnection) -> None:
        """The owner's sign of progress (``Worker.beat``) now and every
        ``BEAT_S`` while this connection's I/O loop turns, connected or not:
        a callback that wedges the loop stops it."""
        self._owner.beat()
        conn.ioloop.call_later(BEAT_S, lambda: self._beat(conn))

    # -- any thread -----------------------------------------------------------

    def call_soon(self, callback: Callable[[], None]) -> bool:
        """Run ``callback`` on the I/O thread; False when there is no connection."""
        conn = self._conn
        if conn is None:
            return False
        try:
            conn.ioloop.add_callback_threadsafe(callback)
        except Exception:  # the loop is closing: nothing left to do on it
            return False
        return True

    # -- the I/O thread -------------------------------------------------------

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> object | None:
        """A timer on this connection's loop (None: no connection); its handle
        serves :meth:`cancel_timer` while the connection lasts."""
        conn = self._conn
        if conn is None:
            return None
        return conn.ioloop.call_later(delay_s, callback)  # type: ignore[no-any-return]

    def cancel_timer(self, handle: object) -> None:
        conn = self._conn
        if conn is not None:
            conn.ioloop.remove_timeout(handle)

    def close(self) -> None:
        """Close the current connection, whatever its state (see :func:`close_connection`)."""
        conn = self._conn
        if conn is not None:
            close_connection(conn)

    def opened(self) -> None:
        """The owner's ``on_open`` succeeded: a later loss starts a new round of nodes."""
        self._failed_in_row = 0

    def _on_open_error(self, conn: pika.SelectConnection, error: BaseException | str) -> None:
        self._log.warning(self._open_error_msg, self.node, error)
        conn.ioloop.stop()

    def _on_closed(self, conn: pika.SelectConnection, reason: BaseException) -> None:
        if not self._owner.stopping:
            self._log.warning(self._closed_msg, self.node, reason)
        conn.ioloop.stop()


class CallSoonOnce:
    """``callback`` on a :class:`ConnectionLoop`'s I/O thread, queued at most
    once until it runs: many asks from any thread, one call."""

    __slots__ = ("_callback", "_lock", "_loop", "_pending")

    def __init__(self, loop: ConnectionLoop, callback: Callable[[], None]) -> None:
        self._loop = loop
        self._callback = callback
        self._lock = threading.Lock()
        self._pending = False

    def __call__(self) -> None:
        with self._lock:
            if self._pending:
                return
            self._pending = True
        if not self._loop.call_soon(self._run):  # no connection: the next one calls it
            self.reset()

    def reset(self) -> None:
        """Not queued (the connection it was queued on ended)."""
        with self._lock:
            self._pending = False

    def _run(self) -> None:
        self.reset()
        self._callback()


# -- pika's private API: one adapter each (checked against pika 1.4.4) --------------


def body_frame_max(conn: pika.SelectConnection) -> int:
    """Largest body frame payload negotiated on this connection.

    pika 1.4.4: ``Connection._body_max_length``, set from the tuned frame_max
    when the connection opens (pika has no public accessor).
    """
    return int(getattr(conn, "_body_max_length", 131072 - 8))


def write_frames(conn: pika.SelectConnection, frames: Sequence[bytes]) -> None:
    """Send pre-encoded frames: straight into the socket when nothing waits
    before them, the rest queued on pika's transport as its own
    ``basic_publish`` does after marshalling.

    Sending at once saves, per publish, a round of the I/O loop and two
    changes of its poll registration (the writer pika would set and clear):
    at a steady rate most publishes are a single event. Only on a plain-text
    transport with an empty buffer (order is kept); any socket error leaves
    the data to pika, whose own write meets the error and ends the connection.

    pika 1.4.4: ``Connection._output_marshaled_frames`` (called by
    ``Connection._send_message``; the public path would re-marshal every
    message, :mod:`triggerhook.amqp.frames` explains why not), and the
    transport's ``_sock`` and ``_state``.
    """
    data = frames[0] if len(frames) == 1 else b"".join(frames)
    sent = _send_now(getattr(conn, "_transport", None), data)
    if sent:
        conn.bytes_sent += sent
    if sent < len(data):
        conn._output_marshaled_frames([data[sent:]])
    else:
        conn.frames_sent += len(frames)


def _send_now(transport: Any, data: bytes) -> int:
    """Bytes of ``data`` written to the socket now (0: leave it all to pika)."""
    if type(transport) is not _PlaintextTransport or transport.get_write_buffer_size():
        return 0
    if transport._state != _PlaintextTransport._STATE_ACTIVE:
        return 0
    try:
        return int(transport._sock.send(data))
    except OSError:  # would block, or broken: pika's path deals with it
        return 0


# A Basic.Ack or Basic.Nack method frame: frame type 1, channel, payload size 13;
# class 60, method 80 (ack) or 120 (nack), delivery tag, flags (bit 0: multiple);
# frame end 0xCE (AMQP 0-9-1, 2.3.5 and the basic class).
_CONFIRM_FRAME = struct.Struct(">BHIHHQBB")
_CONFIRM_HEAD = struct.Struct(">BHIHH")  # what a frame's first bytes must be
_ACK, _NACK = 80, 120

# (delivery tag, multiple, acked): one broker confirm.
Confirm: TypeAlias = tuple[int, bool, bool]


def confirms_of(data: bytes, channel_number: int) -> tuple[list[Confirm], bytes] | None:
    """The confirms in ``data`` and what is left of it, when it holds nothing
    but whole Basic.Ack and Basic.Nack frames of ``channel_number`` and, at
    its end, perhaps the start of one (left: it ends in the next read); None
    otherwise (pika reads it)."""
    size = _CONFIRM_FRAME.size
    whole = len(data) - len(data) % size
    tail = data[whole:]
    if tail and not any(
        _CONFIRM_HEAD.pack(1, channel_number, 13, 60, method).startswith(tail[:9])
        for method in (_ACK, _NACK)
    ):
        return None
    out: list[Confirm] = []
    frames = _CONFIRM_FRAME.iter_unpack(memoryview(data)[:whole])
    for kind, channel, length, klass, method, tag, flags, end in frames:
        if (
            kind != 1
            or channel != channel_number
            or length != 13
            or klass != 60
            or method not in (_ACK, _NACK)
            or end != 0xCE
        ):
            return None
        out.append((tag, bool(flags & 1), method == _ACK))
    return out, tail


def read_confirms(
    conn: pika.SelectConnection,
    channel_number: Callable[[], int | None],
    confirmed: Callable[[Confirm], None],
) -> None:
    """Take the broker's publisher confirms off ``conn``'s incoming data
    before pika decodes it: data that holds only Basic.Ack and Basic.Nack
    frames of the channel ``channel_number()`` names (None: none yet) goes to
    ``confirmed``, one call per frame, in order — with a frame cut at the end
    of a read kept in pika's own buffer for the next; any other read (a
    return, a heartbeat, another channel's frames, or what follows a cut
    frame of those) goes to pika, as before.

    At a steady rate nearly every read of the publishing connection is one
    confirm, and in a burst a stream of them; pika's way — decode each frame
    into a method object, look its callbacks up, call through two decorators
    — costs ten times our own reading of it (docs/benchmarks/levers.md).
    Pika's channel keeps no state of its own about confirms, so nothing else
    needs to see these frames; the counters the heartbeat checker reads
    (``bytes_received``) are kept as pika would.

    pika 1.4.4: ``Connection._on_data_available`` (called with each read, by
    ``BaseConnection._proto_data_received``), ``_frame_buffer`` (the start
    of a frame left from the last read), ``bytes_received`` and
    ``frames_received``.
    """
    slow = conn._on_data_available

    def on_data(data: bytes) -> None:
        number = channel_number()
        buffered = conn._frame_buffer
        read = None if number is None else confirms_of(buffered + data, number)
        if read is None:
            slow(data)  # pika appends it to what it has buffered
            return
        found, tail = read
        conn._frame_buffer = tail
        conn.bytes_received += len(buffered) + len(data) - len(tail)
        conn.frames_received += len(found)
        for confirm in found:
            confirmed(confirm)

    conn._on_data_available = on_data
