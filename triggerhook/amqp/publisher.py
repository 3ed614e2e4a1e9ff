"""The publisher thread: sends fired tasks to RabbitMQ with pipelined confirms.

It owns a pika ``SelectConnection`` and its I/O loop; other threads reach it
only through :meth:`AmqpPublisher.wake` (thread-safe callback). Messages are
persistent and ``mandatory``; up to ``max_unconfirmed`` are in flight at once.

* Ack: the task is handed to the confirmer, which deletes its row.
* Return (unroutable) or Nack: the task is retried with back-off, counted and
  logged; its row stays, so it is never silently dropped.
* Connection lost: every unconfirmed task goes back to the front of the send
  buffer and is published again after reconnecting (at-least-once).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

import pika
import pika.channel
import pika.exceptions
import pika.frame
import pika.spec

from triggerhook.amqp.frames import encode_event
from triggerhook.domain.task import Task
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.engine.worker import FailureHandler, Worker
from triggerhook.errors import BrokerUnavailable, ConfigError
from triggerhook.interfaces import ConfirmSink, RetryHandler
from triggerhook.metrics.counters import Samples

log = logging.getLogger(__name__)

_SLICE = 256  # messages published per I/O-loop turn, so acks are read in between
_FINISH_CHECK_S = 0.02


def _body_frame_max(conn: pika.SelectConnection) -> int:
    """Largest body frame payload negotiated on this connection."""
    return int(getattr(conn, "_body_max_length", 131072 - 8))


def _write_frames(conn: pika.SelectConnection, data: bytes) -> None:
    """Queue pre-encoded frames on pika's transport, as pika's own
    ``basic_publish`` does after marshalling (``Connection._send_message``)."""
    conn._output_marshaled_frames([data])


def amqp_parameters(url: str) -> pika.URLParameters:
    try:
        params = pika.URLParameters(url)
    except Exception as exc:
        raise ConfigError(f"amqp_url: {exc}") from exc
    params.connection_attempts = 1
    params.socket_timeout = 5
    params.blocked_connection_timeout = 30
    return params


class AmqpPublisher(Worker):
    def __init__(
        self,
        url: str,
        exchange: str,
        buffer: SendBuffer,
        confirms: ConfirmSink,
        retry: RetryHandler,
        max_unconfirmed: int,
        on_failure: FailureHandler,
    ) -> None:
        super().__init__("th-publisher", on_failure)
        self._params = amqp_parameters(url)
        self._exchange = exchange
        self._buffer = buffer
        self._confirms = confirms
        self._retry = retry
        self._max_unconfirmed = max_unconfirmed
        self._lock = threading.Lock()
        self._conn: pika.SelectConnection | None = None
        self._channel: pika.channel.Channel | None = None
        self._drain_pending = False
        self._finish_checking = False
        self._next_tag = 0
        self._tags: deque[int] = deque()
        self._unconfirmed: dict[int, Task] = {}
        self._returned: dict[str, str] = {}  # task id -> why the broker returned it
        self._attempts: dict[str, int] = {}
        self.connected = threading.Event()
        self.published = 0
        self.confirmed = 0
        self.returned = 0
        self.nacked = 0
        self.reconnects = 0
        self._lateness = Samples()  # appended by the I/O thread, taken by the metrics thread

    # -- other threads --------------------------------------------------------

    def wake(self) -> None:
        """Ask the I/O loop to publish what is in the buffer (thread-safe)."""
        with self._lock:
            if self._drain_pending or self._conn is None:
                return
            self._drain_pending = True
            conn = self._conn
        try:
            conn.ioloop.add_callback_threadsafe(self._drain)
        except Exception:  # loop closing: the reconnect drains the buffer anyway
            with self._lock:
                self._drain_pending = False

    def finish(self, deadline_s: float) -> None:
        """Publish what is buffered, wait for its confirms, then stop (monotonic deadline)."""
        self.stop(deadline_s)

    def unconfirmed(self) -> int:
        return len(self._unconfirmed)

    def is_connected(self) -> bool:
        return self.connected.is_set()

    def counters(self) -> dict[str, int]:
        return {
            "published": self.published,
            "confirmed": self.confirmed,
            "returned": self.returned,
            "nacked": self.nacked,
            "broker_reconnects": self.reconnects,
        }

    def take_lateness(self) -> list[float]:
        return self._lateness.take()

    # -- the thread -----------------------------------------------------------

    def run(self) -> None:
        while True:
            self._connect_and_serve()
            if self._finished() or self.past_deadline():
                return
            self.back_off(BrokerUnavailable("connection to RabbitMQ lost"), "publishing")

    def _finished(self) -> bool:
        return self.stopping and not self._buffer and not self._unconfirmed

    def _connect_and_serve(self) -> None:
        conn = pika.SelectConnection(
            self._params,
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_open_error,
            on_close_callback=self._on_closed,
        )
        with self._lock:
            self._conn = conn
        try:
            conn.ioloop.start()
        finally:
            with self._lock:
                self._conn = None
                self._drain_pending = False
                self._finish_checking = False
            self._channel = None
            self.connected.clear()
            self._requeue_unconfirmed()
            conn.ioloop.close()

    def _requeue_unconfirmed(self) -> None:
        if self._unconfirmed:
            tasks = [self._unconfirmed[tag] for tag in self._tags if tag in self._unconfirmed]
            log.warning("republishing %d unconfirmed events after reconnect", len(tasks))
            self._buffer.requeue_front(tasks)
        self._unconfirmed.clear()
        self._tags.clear()
        self._returned.clear()
        self._next_tag = 0

    # -- pika callbacks (I/O loop thread) -------------------------------------

    def _on_open(self, conn: pika.SelectConnection) -> None:
        conn.channel(on_open_callback=self._on_channel_open)

    def _on_open_error(self, conn: pika.SelectConnection, error: BaseException | str) -> None:
        log.warning("cannot connect to RabbitMQ: %s", error)
        conn.ioloop.stop()

    def _on_closed(self, conn: pika.SelectConnection, reason: BaseException) -> None:
        if not self.stopping:
            log.warning("RabbitMQ connection closed: %s", reason)
        conn.ioloop.stop()

    def _on_channel_open(self, channel: pika.channel.Channel) -> None:
        self._channel = channel
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_return_callback(self._on_return)
        channel.exchange_declare(
            exchange=self._exchange,
            exchange_type="topic",
            durable=True,
            callback=lambda _frame: channel.confirm_delivery(
                ack_nack_callback=self._on_confirm, callback=self._on_ready
            ),
        )

    def _on_channel_closed(self, channel: pika.channel.Channel, reason: BaseException) -> None:
        self._channel = None
        if self.stopping:
            return
        # e.g. the exchange exists with another type: log loudly, reconnect later.
        log.error("RabbitMQ channel closed: %s", reason)
        if self._conn is not None and self._conn.is_open:
            self._conn.close()

    def _on_ready(self, _frame: Any) -> None:
        if self._backoff.attempt:
            self.reconnects += 1
        self.succeeded("publishing")
        log.info("publishing to exchange %r", self._exchange)
        self.connected.set()
        self._drain()

    def _check_finish(self) -> None:
        """While stopping: close once everything is confirmed or time is up."""
        conn = self._conn
        if conn is None:
            return
        if self._finished() or self.past_deadline():
            conn.close()
            return
        conn.ioloop.call_later(_FINISH_CHECK_S, self._check_finish)

    def _drain(self) -> None:
        with self._lock:
            self._drain_pending = False
            start_finish_check = self.stopping and not self._finish_checking
            self._finish_checking |= start_finish_check
        if start_finish_check:  # stop() wakes us: one check loop per connection
            self._check_finish()
        channel = self._channel
        if channel is None or not self.connected.is_set():
            return
        budget = self._max_unconfirmed - len(self._unconfirmed)
        if budget <= 0:
            return  # acks call us again
        tasks = self._buffer.take(min(budget, _SLICE))
        if not tasks:
            return
        self._publish(channel, tasks)
        if len(self._buffer) and len(tasks) < budget:
            self.wake()

    def _publish(self, channel: pika.channel.Channel, tasks: list[Task]) -> None:
        conn = self._conn
        if conn is None or not channel.is_open:
            self._buffer.requeue_front(tasks)
            return
        number = channel.channel_number
        exchange = self._exchange
        max_body = _body_frame_max(conn)
        tags = self._tags
        unconfirmed = self._unconfirmed
        tag = self._next_tag
        frames = []
        record = self._lateness.record
        for task in tasks:
            fired_ms = int(time.time() * 1000)
            record(fired_ms - task.due_ms)
            frames.append(
                encode_event(
                    number,
                    exchange,
                    task.routing_key,
                    task.payload,
                    task.id,
                    task.due_ms,
                    fired_ms,
                    max_body,
                )
            )
            tag += 1
            tags.append(tag)
            unconfirmed[tag] = task
        self._next_tag = tag
        self.published += len(tasks)
        _write_frames(conn, b"".join(frames))

    def _on_return(
        self,
        _channel: pika.channel.Channel,
        method: pika.spec.Basic.Return,
        properties: pika.spec.BasicProperties,
        _body: bytes,
    ) -> None:
        # RabbitMQ sends basic.return before the basic.ack of the same message;
        # the ack then retries it (see _on_confirm).
        self.returned += 1
        self._returned[properties.message_id] = f"returned {method.reply_code} {method.reply_text}"

    def _on_confirm(self, frame: pika.frame.Method) -> None:
        method = frame.method
        acked = isinstance(method, pika.spec.Basic.Ack)
        settled = self._settle(method.delivery_tag, method.multiple)
        delivered: list[str] = []
        for task in settled:
            returned = self._returned.pop(task.id, None)
            if acked and returned is None:
                delivered.append(task.id)
                self._attempts.pop(task.id, None)
            else:
                self.nacked += 0 if acked else 1
                attempt = self._attempts.get(task.id, 0) + 1
                self._attempts[task.id] = attempt
                self._retry(task, attempt, returned or "nacked by the broker")
        if delivered:
            self.confirmed += len(delivered)
            self._confirms.confirmed(delivered)
        self._drain()

    def _settle(self, tag: int, multiple: bool) -> list[Task]:
        unconfirmed = self._unconfirmed
        tags = self._tags
        if not multiple:
            task = unconfirmed.pop(tag, None)
            while tags and tags[0] not in unconfirmed:
                tags.popleft()
            return [task] if task is not None else []
        out = []
        while tags and tags[0] <= tag:
            task = unconfirmed.pop(tags.popleft(), None)
            if task is not None:
                out.append(task)
        return out
