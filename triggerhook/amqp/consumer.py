"""A consumer of one durable queue with a dead-letter queue beside it.

What the command channel needs of RabbitMQ, and nothing of what commands
mean (that is :mod:`triggerhook.api.commands`): its I/O thread (the
:class:`QueueConsumer` worker, on the shared :class:`ConnectionLoop`) declares
``dead_queue`` and ``queue`` (durable, shared: several daemons consume one
queue), turns on publisher confirms, takes up to ``prefetch`` messages at a
time and hands each to ``on_message`` as a :class:`Delivery` (plain values;
the pika objects stay here), on the I/O thread.

With an ``exchange`` (the webhook bridge's queues), the consumer also
declares it (topic, durable), binds ``queue`` to it with each of
``bindings``, binds ``dead_queue`` (when named) with ``dead_routing_key``,
and publishes dead letters there with that key; without one (the command
channel), dead letters go to ``dead_queue`` through the default exchange.

A delivery is settled with a :class:`Settlement`, by :meth:`QueueConsumer.settle`
on the I/O thread or :meth:`QueueConsumer.post` from any thread (one wake-up
for many results): the reply (if any) is published to its ``reply_to``
(default exchange, same ``correlation_id``), then the message is acked (ACK),
or published unchanged to the dead letters' place with the error header
(and the settlement's own headers) and acked once that publish is confirmed
(DEAD), or left unacked (LEAVE: the broker delivers it again). A delivery
whose channel is gone is not settled: the broker delivers it again. A dead
letter returned or nacked reconnects, which declares the queues again.
"""

from __future__ import annotations

import enum
import functools
import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import pika
import pika.channel
import pika.frame
import pika.spec

from triggerhook.amqp.connection import AmqpNodes, ConnectionLoop
from triggerhook.amqp.content import bound_bodies, declared_size
from triggerhook.runtime.worker import FailureHandler, Worker

log = logging.getLogger(__name__)

_STOP_CHECK_S = 0.02
# Of a body declared over the limit, what is kept (for its dead letter): enough
# to tell what it was; 4 KiB a message in flight, however large it was sent.
KEPT_OF_OVERSIZED_BYTES = 4096
# A log line names the task of a body up to this size only: a larger one is
# not parsed again for a log line (the command itself was parsed once).
_PEEK_MAX_BYTES = 64 * 1024
# Properties a dead letter keeps (all but headers, expiration and user_id).
_COPIED_PROPERTIES = (
    "content_type",
    "content_encoding",
    "delivery_mode",
    "priority",
    "correlation_id",
    "reply_to",
    "message_id",
    "timestamp",
    "type",
    "app_id",
    "cluster_id",
)


class Settle(enum.Enum):
    ACK = "ack"  # applied (or answered): ack
    DEAD = "dead"  # malformed: dead-letter, ack once the dead letter is confirmed
    LEAVE = "leave"  # stopping or connection gone: the broker delivers it again


@dataclass(frozen=True, slots=True)
class Settlement:
    """How to settle a delivery: ack, dead-letter or leave it; the reply first."""

    settle: Settle
    reply: bytes | None = None  # the body published to reply_to, if one is asked for
    reason: str = ""  # a dead letter's error header
    headers: tuple[tuple[str, object], ...] = ()  # a dead letter's other headers of its own


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message taken from the queue, on the channel that must settle it."""

    channel: Any  # opaque to the user: the channel that took it (and must settle it)
    delivery_tag: int
    redelivered: bool
    type: str | None
    message_id: str | None
    correlation_id: str | None
    reply_to: str | None
    user_id: str | None
    headers: Mapping[str, Any] | None
    body: bytes  # all of it; only its first KEPT_OF_OVERSIZED_BYTES if over the limit
    body_size: int  # as its content header declared it
    properties: object  # the broker client's own, copied into a dead letter
    routing_key: str = ""  # the one it was published with

    def context(self) -> dict[str, object]:
        """Logging ``extra``: type, message_id and (when known) task_id; the
        body is looked into only if it is whole and small."""
        small = self.body_size == len(self.body) <= _PEEK_MAX_BYTES
        found = (small and _peek_id(self.body)) or (self.type == "create" and self.message_id)
        extra: dict[str, object] = {"type": self.type, "message_id": self.message_id}
        if found:
            extra["task_id"] = found
        return extra


class QueueConsumer(Worker):
    """Consumes ``queue`` on its own thread until :meth:`finish`.

    ``on_message`` runs on the I/O thread for each delivery; ``on_end`` on the
    same thread when it ends (also if it dies of a bug, after which
    ``on_failure`` is called). ``error_header`` is the header a dead letter
    says why in; ``private_headers`` are not copied into it. Of a body declared
    over ``max_body_bytes`` (None: no limit) only the first
    ``KEPT_OF_OVERSIZED_BYTES`` are kept (:mod:`triggerhook.amqp.content`): the
    delivery's ``body_size`` says how large it was.
    """

    def __init__(
        self,
        nodes: AmqpNodes,
        queue: str,
        dead_queue: str,
        prefetch: int,
        on_message: Callable[[Delivery], None],
        on_end: Callable[[], None],
        on_failure: FailureHandler,
        error_header: str,
        private_headers: Collection[str] = (),
        name: str = "th-commands",
        queue_arguments: Mapping[str, str] | None = None,
        max_body_bytes: int | None = None,
        topology: Topology | None = None,
        what: str = "command consumer",
        consuming: str = "consuming commands",
    ) -> None:
        super().__init__(name, on_failure)
        self._topology = topology or Topology()
        self._what = what  # names it in log lines
        self._consuming_msg = consuming + " from queue %r at %s"
        self._max_body_bytes = max_body_bytes
        self.queue = queue
        self.dead_queue = dead_queue
        self._queue_arguments = dict(queue_arguments or {})  # both queues' (their type)
        self._prefetch = prefetch
        self._on_message_cb = on_message
        self._on_end = on_end
        self._error_header = error_header
        self._private_headers = frozenset(private_headers)
        self._loop = ConnectionLoop(nodes, self, what, self._on_open, self._reset, log, what)
        self._drain_deadline_s = math.inf  # settling in-flight deliveries, once stopping
        self._connected = threading.Event()
        self._lock = threading.Lock()  # guards _results, _drain_pending
        self._results: deque[tuple[Delivery, Settlement]] = deque()
        self._drain_pending = False
        # I/O thread only:
        self._channel: pika.channel.Channel | None = None
        self._consumer_tag: str | None = None
        self._pending = 0  # deliveries of the current channel not yet settled
        self._publish_seq = 0
        self._dead_letters: dict[int, Delivery] = {}  # publish tag -> original
        self._ever_consumed = False
        self.received = 0
        self.applied = 0
        self.dead_lettered = 0
        self.replied = 0
        self.reconnects = 0

    # -- other threads ----------------------------------------------------------

    def finish(self, timeout_s: float) -> None:
        """Stop consuming; settle what is in flight for up to ``timeout_s``, then close."""
        self._drain_deadline_s = time.monotonic() + timeout_s
        self.stop()  # interrupts a reconnect back-off at once; wake() begins the stop

    def wake(self) -> None:
        self._loop.call_soon(self._begin_stop)

    def is_connected(self) -> bool:
        return self._connected.is_set()

    def is_current(self, delivery: Delivery) -> bool:
        """Whether ``delivery`` can still be settled (its channel is open)."""
        channel = self._channel
        return channel is delivery.channel and channel is not None and bool(channel.is_open)

    def post(self, delivery: Delivery, outcome: Settlement) -> None:
        """Settle ``delivery`` on the I/O thread (thread-safe)."""
        with self._lock:
            self._results.append((delivery, outcome))
            if self._drain_pending:
                return
            self._drain_pending = True
        if not self._loop.call_soon(self._drain_results):
            with self._lock:
                self._drain_pending = False

    # -- the I/O thread ------------------------------------------------------------

    def run(self) -> None:
        try:
            if not self.stopping:
                self._loop.run(lambda: self.stopping)
        finally:
            self._on_end()

    def _reset(self) -> None:
        with self._lock:
            self._drain_pending = False
            self._results.clear()
        self._connected.clear()
        self._channel = None
        self._consumer_tag = None
        self._pending = 0
        self._dead_letters.clear()

    def _on_open(self, conn: pika.SelectConnection) -> None:
        if self.stopping:
            self._loop.close()
            return
        conn.channel(on_open_callback=self._on_channel_open)

    def _on_channel_open(self, channel: pika.channel.Channel) -> None:
        self._channel = channel
        self._publish_seq = 0
        if self._max_body_bytes is not None:
            bound_bodies(channel, self._max_body_bytes, KEPT_OF_OVERSIZED_BYTES)
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_return_callback(self._on_return)
        channel.add_on_cancel_callback(self._on_cancelled)
        _chain(self._declarations(channel), lambda: self._on_declared(channel))

    def _declarations(self, channel: pika.channel.Channel) -> list[_Step]:
        """What to declare, in order: the exchange (if any), the dead-letter
        queue (if any) and its binding, the queue and its bindings."""
        # Durable, shared (never exclusive): several daemons consume one queue.
        queue_declare = functools.partial(
            channel.queue_declare, durable=True, arguments=self._queue_arguments
        )
        exchange, dead_key = self._topology.exchange, self._topology.dead_routing_key
        steps: list[_Step] = []
        if exchange:
            steps.append(
                lambda done: channel.exchange_declare(
                    exchange=exchange, exchange_type="topic", durable=True, callback=done
                )
            )
        if self.dead_queue:
            steps.append(lambda done: queue_declare(queue=self.dead_queue, callback=done))
            if exchange and dead_key:
                steps.append(_bind(channel, self.dead_queue, exchange, dead_key))
        steps.append(lambda done: queue_declare(queue=self.queue, callback=done))
        steps.extend(_bind(channel, self.queue, exchange, key) for key in self._topology.bindings)
        return steps

    def _on_declared(self, channel: pika.channel.Channel) -> None:
        channel.confirm_delivery(
            ack_nack_callback=self._on_confirm,
            callback=lambda _frame: channel.basic_qos(
                prefetch_count=self._prefetch, callback=lambda _f: self._consume(channel)
            ),
        )

    def _consume(self, channel: pika.channel.Channel) -> None:
        if self.stopping:
            self._loop.close()
            return
        self._consumer_tag = channel.basic_consume(
            queue=self.queue,
            on_message_callback=self._on_message,
            auto_ack=False,
            callback=self._on_consuming,
        )

    def _on_consuming(self, _frame: Any) -> None:
        if self._ever_consumed:
            self.reconnects += 1
        self._ever_consumed = True
        self.succeeded(self._what)
        self._loop.opened()
        self._connected.set()
        log.info(self._consuming_msg, self.queue, self._loop.node)

    def _on_channel_closed(self, _channel: Any, reason: BaseException) -> None:
        self._channel = None
        self._connected.clear()
        if not self.stopping:
            # e.g. a queue exists with other arguments: log loudly, retry later.
            log.error("%s: RabbitMQ channel closed: %s", self._what, reason)
        self._loop.close()

    def _on_cancelled(self, _frame: Any) -> None:
        # The broker cancels our consumer when the queue is deleted: reconnect,
        # which declares it again.
        log.warning("%s: cancelled by the broker (queue %r deleted?)", self._what, self.queue)
        self._loop.close()

    def _on_message(
        self,
        channel: pika.channel.Channel,
        method: pika.spec.Basic.Deliver,
        properties: pika.spec.BasicProperties,
        body: bytes,
    ) -> None:
        if self.stopping:
            return  # left unacked: delivered again after the connection closes
        self.received += 1
        self._pending += 1
        self._on_message_cb(
            Delivery(
                channel,
                method.delivery_tag,
                bool(method.redelivered),
                properties.type,
                properties.message_id,
                properties.correlation_id,
                properties.reply_to,
                properties.user_id,
                properties.headers,
                body,
                declared_size(body),
                properties,
                method.routing_key,
            )
        )

    def _drain_results(self) -> None:
        with self._lock:
            self._drain_pending = False
            results = list(self._results)
            self._results.clear()
        for delivery, outcome in results:
            self.settle(delivery, outcome)

    def settle(self, delivery: Delivery, outcome: Settlement) -> None:
        """Reply, then ack, dead-letter or leave ``delivery`` (I/O thread only)."""
        channel = self._channel
        if channel is None or channel is not delivery.channel or not channel.is_open:
            return  # its channel is gone: the broker delivers it again
        if outcome.reply is not None and delivery.reply_to:
            self._publish_reply(channel, delivery, outcome.reply)
        if outcome.settle is Settle.DEAD:
            self._publish_dead_letter(channel, delivery, outcome)
            return  # acked once the dead letter is confirmed
        self._pending -= 1
        if outcome.settle is Settle.ACK:
            channel.basic_ack(delivery.delivery_tag)
            self.applied += 1
        elif not self.stopping:  # not expected: LEAVE comes from stopping
            channel.basic_nack(delivery.delivery_tag, requeue=True)

    def _publish_reply(
        self, channel: pika.channel.Channel, delivery: Delivery, body: bytes
    ) -> None:
        channel.basic_publish(
            exchange="",
            routing_key=delivery.reply_to or "",
            body=body,
            properties=pika.BasicProperties(
                content_type="application/json", correlation_id=delivery.correlation_id
            ),
        )
        self._publish_seq += 1
        self.replied += 1

    def _publish_dead_letter(
        self, channel: pika.channel.Channel, delivery: Delivery, outcome: Settlement
    ) -> None:
        # Private headers (the token) stay out of the dead-letter queue, whoever may read it.
        private = self._private_headers
        kept = {k: v for k, v in (delivery.headers or {}).items() if k not in private}
        headers = {**kept, self._error_header: outcome.reason, **dict(outcome.headers)}
        exchange, dead_key = self._topology.exchange, self._topology.dead_routing_key
        channel.basic_publish(
            exchange=exchange if dead_key else "",
            routing_key=dead_key or self.dead_queue,
            body=delivery.body,
            properties=_with_headers(delivery.properties, headers),
            mandatory=True,
        )
        self._publish_seq += 1
        self._dead_letters[self._publish_seq] = delivery

    def _on_return(self, _channel: Any, method: Any, _props: Any, _body: bytes) -> None:
        # Only dead letters are mandatory: their queue is gone. Reconnecting
        # declares it again, and the unacked originals are delivered again.
        log.error(
            "%s: dead letter returned (%s %s); reconnecting",
            self._what,
            method.reply_code,
            method.reply_text,
        )
        self._loop.close()

    def _on_confirm(self, frame: pika.frame.Method) -> None:
        method = frame.method
        acked = isinstance(method, pika.spec.Basic.Ack)
        tags = [
            tag
            for tag in self._dead_letters
            if tag == method.delivery_tag or (method.multiple and tag < method.delivery_tag)
        ]
        channel = self._channel
        for tag in tags:
            original = self._dead_letters.pop(tag)
            if not acked or channel is None:
                log.error(
                    "%s: dead letter not confirmed; reconnecting",
                    self._what,
                    extra=original.context(),
                )
                self._loop.close()
                return
            channel.basic_ack(original.delivery_tag)
            self._pending -= 1
            self.dead_lettered += 1

    def _begin_stop(self) -> None:
        channel = self._channel
        if channel is not None and channel.is_open and self._consumer_tag is not None:
            channel.basic_cancel(self._consumer_tag)
        self._check_stopped()

    def _check_stopped(self) -> None:
        if self._loop.connection is None:
            return
        if self._pending <= 0 or time.monotonic() >= self._drain_deadline_s:
            self._loop.close()
            return
        self._loop.call_later(_STOP_CHECK_S, self._check_stopped)


# One declaration: called with the callback that starts the next.
_Step = Callable[[Callable[[Any], None]], None]


@dataclass(frozen=True, slots=True)
class Topology:
    """Where the queue's messages come from and its dead letters go (see
    the module's doc); the default: the command channel's, no exchange."""

    exchange: str = ""
    bindings: tuple[str, ...] = ()  # routing-key patterns binding the queue to ``exchange``
    dead_routing_key: str = ""  # dead letters published to ``exchange`` with it


def _bind(channel: pika.channel.Channel, queue: str, exchange: str, key: str) -> _Step:
    return lambda done: channel.queue_bind(queue, exchange, routing_key=key, callback=done)


def _chain(steps: list[_Step], then: Callable[[], None]) -> None:
    """Run ``steps`` one after the other (each once the broker answered the
    one before), then ``then``."""
    if not steps:
        then()
        return
    first, rest = steps[0], steps[1:]
    first(lambda _frame: _chain(rest, then))


def _peek_id(body: bytes) -> str | None:
    """The ``"id"`` of a JSON body, if it has one (for log lines only)."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    task_id = document.get("id") if isinstance(document, dict) else None
    return task_id if isinstance(task_id, str) else None


def _with_headers(props: Any, headers: Mapping[str, object]) -> pika.BasicProperties:
    """A copy of ``props`` with ``headers`` replaced, without ``expiration`` (a
    dead letter is kept until someone looks at it) and ``user_id`` (the broker
    accepts only the publishing connection's own user)."""
    fields = {name: getattr(props, name) for name in _COPIED_PROPERTIES}
    return pika.BasicProperties(headers=dict(headers), **fields)
