"""The AMQP command channel: create, cancel and reschedule tasks by message.

The daemon consumes the durable queue ``command_queue``. A command is a message
whose AMQP ``type`` is ``create``, ``cancel`` or ``reschedule`` and whose body
is JSON shaped like the HTTP API's bodies (:mod:`triggerhook.api.bodies`);
cancel and reschedule carry the task's ``"id"``.

* A command is acknowledged only after its change is committed, so a crash
  before the commit leaves it in the queue and the broker delivers it again.
* With ``reply_to`` set, the answer goes there (default exchange, routing key
  = ``reply_to``, same ``correlation_id``): ``{"ok": true, "id": ...}`` or
  ``{"ok": false, "error": {"code", "message", "field"?}}``. Outcomes
  (``conflict``, ``not_found``, ``too_late``) are answers: replied and acked.
* Before the body is read (:mod:`triggerhook.api.command_auth`): with
  ``api_token`` set, a command without ``authorization: Bearer <token>`` or an
  allowed ``user_id`` is dead-lettered as ``unauthorized`` (no reply, nothing
  applied, a rate-limited warning), and one whose ``reply_to`` is not direct
  reply-to or a queue starting with ``command_reply_prefix`` as
  ``forbidden_reply_to``.
* A malformed command (``malformed_json``, ``unknown_type``, ``invalid``) is
  published, body and properties unchanged plus the header
  ``x-triggerhook-error: <reason>`` (``expiration``, ``user_id`` and the
  ``authorization`` header dropped), to the durable queue
  ``<command_queue>.dead`` (with publisher confirms) and then acked: it is
  never retried. So is a command whose handling raised an unexpected error
  (``internal_error``, logged with its traceback) three times in a row.
* Transient failures (database down) are retried with back-off while running;
  at stop the command stays unacked and the broker delivers it again.

Delivery is at-least-once, so a command may be applied again if the daemon
dies between its commit and its ack: a create with an ``"id"`` (or, without
one, a valid ``message_id``, which becomes the task id) is then a no-op
answered ``created: false``; a create with neither gets a new UUID and may
create a second task; a repeated cancel answers ``not_found``; a repeated
reschedule with ``delay`` moves the task again from the redelivery time.

Threads: one I/O thread owns the pika ``SelectConnection`` (it declares the
queues, takes messages, publishes replies and dead letters, acks); a small
pool of worker threads runs the blocking library calls, whose concurrent
calls share group-commit transactions; results go back to the I/O thread
through ``add_callback_threadsafe``.
"""

from __future__ import annotations

import enum
import json
import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions
import pika.spec

from triggerhook.amqp.connection import close_connection
from triggerhook.amqp.publisher import amqp_parameters
from triggerhook.api.command_auth import AUTH_HEADER, LOG_INTERVAL_S, CommandGuard, Unauthorized
from triggerhook.api.command_messages import Command, Rejected, Reply, execute, max_body_bytes
from triggerhook.app import TriggerHook
from triggerhook.errors import (
    EngineFailure,
    NotRunningError,
    SchemaError,
    TransientError,
)
from triggerhook.ratelimit import RateLimitedLog
from triggerhook.retry import Backoff
from triggerhook.runtime.worker import FailureHandler
from triggerhook.settings import Settings

log = logging.getLogger(__name__)

ERROR_HEADER = "x-triggerhook-error"
MAX_WORKERS = 32
# Attempts at a command whose handling raised an unexpected error before it is
# dead-lettered as ``internal_error``.
UNEXPECTED_ATTEMPTS = 3
# Failures that are not the message's fault: retried, never dead-lettered.
_RETRIED = (TransientError, EngineFailure, SchemaError, NotRunningError)
_STOP_CHECK_S = 0.02
_CLOSE_GRACE_S = 5.0  # beyond the stop deadline, for the connection to close
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

# -- the consumer ----------------------------------------------------------------------


class Settle(enum.Enum):
    ACK = "ack"  # applied (or answered): ack
    DEAD = "dead"  # malformed: dead-letter, ack once the dead letter is confirmed
    LEAVE = "leave"  # stopping or connection gone: the broker delivers it again


@dataclass(frozen=True, slots=True)
class Outcome:
    settle: Settle
    reply: Reply | None = None
    reason: str = ""


_LEAVE = Outcome(Settle.LEAVE)


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message taken from the queue, on the channel that must ack it."""

    channel: Any
    delivery_tag: int
    redelivered: bool
    properties: Any  # pika.spec.BasicProperties
    body: bytes

    def context(self) -> dict[str, object]:
        """Logging ``extra``: type, message_id and (when known) task_id."""
        props = self.properties
        found = _peek_id(self.body) or (props.type == "create" and props.message_id)
        extra: dict[str, object] = {"type": props.type, "message_id": props.message_id}
        if found:
            extra["task_id"] = found
        return extra


def _peek_id(body: bytes) -> str | None:
    """The ``"id"`` of a command body, if it has one (for log lines only)."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    task_id = document.get("id") if isinstance(document, dict) else None
    return task_id if isinstance(task_id, str) else None


class CommandConsumer:
    """Consumes ``settings.command_queue`` and applies the commands to ``hook``.

    ``stop(timeout_s)`` stops taking messages, lets those being applied commit
    and be acked (until the timeout; the rest stay unacked, so the broker
    delivers them again), closes the connection and returns. ``on_failure``
    is called only if a thread of the consumer dies of a bug.
    """

    def __init__(self, hook: TriggerHook, settings: Settings, on_failure: FailureHandler) -> None:
        self._hook = hook
        self._on_failure = on_failure
        self._params = amqp_parameters(settings.amqp_url)
        self.queue = settings.command_queue
        self.dead_queue = f"{settings.command_queue}.dead"
        self._prefetch = settings.command_prefetch
        self._body_limit = max_body_bytes(settings)
        self._guard = CommandGuard(settings)
        self._refusals_log = RateLimitedLog(log, LOG_INTERVAL_S)  # one line per kind
        self._rejections_log = RateLimitedLog(log, LOG_INTERVAL_S)
        if not self._guard.authenticates and settings.command_users():
            log.warning(
                "command_allowed_users is ignored: api_token is empty, so commands are "
                "not authenticated (the vhost's permissions are the only guard)"
            )
        self._stopping = threading.Event()
        self._deadline_s = math.inf
        self._connected = threading.Event()
        self._lock = threading.Lock()  # guards _conn, _results, _drain_pending
        self._conn: Any = None
        self._results: deque[tuple[Delivery, Outcome]] = deque()
        self._drain_pending = False
        # I/O thread only:
        self._channel: Any = None
        self._consumer_tag: str | None = None
        self._pending = 0  # deliveries of the current channel not yet settled
        self._publish_seq = 0
        self._dead_letters: dict[int, Delivery] = {}  # publish tag -> original
        self._ever_consumed = False
        self._backoff = Backoff()
        self._work: queue.SimpleQueue[Delivery | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._workers: list[threading.Thread] = []
        self.received = 0
        self.applied = 0
        self.dead_lettered = 0
        self.refused = 0  # dead-lettered by the guard: unauthorized, or a forbidden reply_to
        self.replied = 0
        self.reconnects = 0

    # -- other threads ----------------------------------------------------------

    def start(self) -> None:
        count = max(1, min(self._prefetch, MAX_WORKERS))
        self._workers = [
            threading.Thread(target=self._work_loop, name=f"th-command-{n}", daemon=True)
            for n in range(count)
        ]
        for worker in self._workers:
            worker.start()
        self._thread = threading.Thread(target=self._main, name="th-commands", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        """Stop consuming; wait up to ``timeout_s`` for commands in flight."""
        self._deadline_s = time.monotonic() + timeout_s
        self._stopping.set()
        self._call_soon(self._begin_stop)
        self.join(timeout_s + _CLOSE_GRACE_S)

    def join(self, timeout_s: float | None = None) -> bool:
        deadline = math.inf if timeout_s is None else time.monotonic() + timeout_s
        threads = [self._thread] if self._thread is not None else []
        for thread in [*threads, *self._workers]:
            left = None if deadline == math.inf else max(0.0, deadline - time.monotonic())
            thread.join(left)
        return not any(thread.is_alive() for thread in [*threads, *self._workers])

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def is_connected(self) -> bool:
        return self._connected.is_set()

    def _call_soon(self, callback: Callable[[], None]) -> bool:
        """Run ``callback`` on the I/O thread; False when there is no connection."""
        with self._lock:
            conn = self._conn
        if conn is None:
            return False
        try:
            conn.ioloop.add_callback_threadsafe(callback)
        except Exception:  # the loop is closing: nothing left to do on it
            return False
        return True

    # -- worker threads -----------------------------------------------------------

    def _work_loop(self) -> None:
        try:
            while (delivery := self._work.get()) is not None:
                self._post(delivery, self._process(delivery))
        except BaseException as exc:
            log.critical("command worker failed: %r", exc, exc_info=exc)
            self._on_failure(threading.current_thread().name, exc)

    def _process(self, delivery: Delivery) -> Outcome:
        props = delivery.properties
        command = Command(props.type, delivery.body, props.message_id, delivery.redelivered)
        backoff: Backoff | None = None  # made on the first failure: seeding costs
        unexpected = 0
        while not self._stopping.is_set() and self._is_current(delivery):
            try:
                outcome = self._attempt(command, delivery)
                if backoff is not None:
                    log.info(
                        "command handled after %d failed attempts",
                        backoff.attempt,
                        extra=delivery.context(),
                    )
                return outcome
            except _RETRIED as exc:
                failure: Exception = exc
            except Exception as exc:
                # A few more attempts first: a group commit fails every call in
                # its batch, and this command may only have shared one.
                unexpected += 1
                if unexpected >= UNEXPECTED_ATTEMPTS:
                    log.error("command failed", exc_info=True, extra=delivery.context())
                    rejected = Rejected("internal_error", f"unexpected error: {exc!r}")
                    return Outcome(Settle.DEAD, rejected.reply(), rejected.reason)
                failure = exc
            backoff = backoff or Backoff()
            delay_s = backoff.next_delay_s()
            log.warning(
                "command failed (attempt %d), retrying in %.2fs: %s",
                backoff.attempt,
                delay_s,
                failure,
                extra=delivery.context(),
            )
            self._stopping.wait(delay_s)
        return _LEAVE

    def _attempt(self, command: Command, delivery: Delivery) -> Outcome:
        try:
            reply = execute(self._hook, command, self._body_limit)
        except Rejected as exc:
            # Anyone who may publish can send these at will: one line per kind.
            self._rejections_log.warning(
                exc.code, "command rejected: %s", exc.reason, extra=delivery.context()
            )
            return Outcome(Settle.DEAD, exc.reply(), exc.reason)
        log.debug("command applied: %s", reply, extra=delivery.context())
        return Outcome(Settle.ACK, reply)

    def _is_current(self, delivery: Delivery) -> bool:
        channel = self._channel
        return channel is delivery.channel and bool(channel.is_open)

    def _post(self, delivery: Delivery, outcome: Outcome) -> None:
        """Hand a result to the I/O thread (one wake-up for many results)."""
        with self._lock:
            self._results.append((delivery, outcome))
            if self._drain_pending or self._conn is None:
                return
            self._drain_pending = True
        if not self._call_soon(self._drain_results):
            with self._lock:
                self._drain_pending = False

    # -- the I/O thread ------------------------------------------------------------

    def _main(self) -> None:
        try:
            while not self._stopping.is_set():
                self._connect_and_serve()
                if self._stopping.is_set():
                    break
                delay_s = self._backoff.next_delay_s()
                log.warning(
                    "command consumer: reconnecting to RabbitMQ in %.2fs (attempt %d)",
                    delay_s,
                    self._backoff.attempt,
                )
                self._stopping.wait(delay_s)
        except BaseException as exc:
            log.critical("command consumer failed: %r", exc, exc_info=exc)
            self._on_failure("th-commands", exc)
        finally:
            for _ in self._workers:
                self._work.put(None)

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
                self._results.clear()
            self._connected.clear()
            self._channel = None
            self._consumer_tag = None
            self._pending = 0
            self._dead_letters.clear()
            conn.ioloop.close()

    def _close(self) -> None:
        if self._conn is not None:
            close_connection(self._conn)

    def _on_open(self, conn: Any) -> None:
        if self._stopping.is_set():
            self._close()
            return
        conn.channel(on_open_callback=self._on_channel_open)

    def _on_open_error(self, conn: Any, error: BaseException | str) -> None:
        log.warning("command consumer cannot connect to RabbitMQ: %s", error)
        conn.ioloop.stop()

    def _on_closed(self, conn: Any, reason: BaseException) -> None:
        if not self._stopping.is_set():
            log.warning("command consumer: RabbitMQ connection closed: %s", reason)
        conn.ioloop.stop()

    def _on_channel_open(self, channel: Any) -> None:
        self._channel = channel
        self._publish_seq = 0
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_return_callback(self._on_return)
        channel.add_on_cancel_callback(self._on_cancelled)
        # Durable, shared (never exclusive): several daemons consume one queue.
        channel.queue_declare(
            queue=self.dead_queue,
            durable=True,
            callback=lambda _frame: channel.queue_declare(
                queue=self.queue, durable=True, callback=lambda _f: self._on_declared(channel)
            ),
        )

    def _on_declared(self, channel: Any) -> None:
        channel.confirm_delivery(
            ack_nack_callback=self._on_confirm,
            callback=lambda _frame: channel.basic_qos(
                prefetch_count=self._prefetch, callback=lambda _f: self._consume(channel)
            ),
        )

    def _consume(self, channel: Any) -> None:
        if self._stopping.is_set():
            self._close()
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
        if self._backoff.attempt:
            log.info("command consumer recovered after %d failed attempts", self._backoff.attempt)
            self._backoff.reset()
        self._connected.set()
        log.info("consuming commands from queue %r", self.queue)

    def _on_channel_closed(self, _channel: Any, reason: BaseException) -> None:
        self._channel = None
        self._connected.clear()
        if not self._stopping.is_set():
            # e.g. a queue exists with other arguments: log loudly, retry later.
            log.error("command consumer: RabbitMQ channel closed: %s", reason)
        self._close()

    def _on_cancelled(self, _frame: Any) -> None:
        # The broker cancels our consumer when the queue is deleted: reconnect,
        # which declares it again.
        log.warning("command consumer cancelled by the broker (queue %r deleted?)", self.queue)
        self._close()

    def _on_message(self, channel: Any, method: Any, properties: Any, body: bytes) -> None:
        if self._stopping.is_set():
            return  # left unacked: delivered again after the connection closes
        self.received += 1
        self._pending += 1
        delivery = Delivery(
            channel, method.delivery_tag, bool(method.redelivered), properties, body
        )
        # Here, not on a worker: a header lookup and a digest comparison, so
        # a flood of unauthorized commands never reaches the body parser.
        try:
            self._guard.check(properties.headers, properties.user_id, properties.reply_to)
        except Rejected as exc:
            self._refuse(delivery, exc)
            return
        self._work.put(delivery)

    def _refuse(self, delivery: Delivery, exc: Rejected) -> None:
        """Dead-letter a command the guard refused, without a reply."""
        self.refused += 1
        what = (
            "unauthorized command dead-lettered"
            if isinstance(exc, Unauthorized)
            else "command with a forbidden reply_to dead-lettered"
        )
        props = delivery.properties
        self._refusals_log.warning(
            what,
            "%s: %s",
            what,
            exc.message,
            extra={"type": props.type, "message_id": props.message_id},
        )
        self._settle(delivery, Outcome(Settle.DEAD, None, exc.reason))

    def _drain_results(self) -> None:
        with self._lock:
            self._drain_pending = False
            results = list(self._results)
            self._results.clear()
        for delivery, outcome in results:
            self._settle(delivery, outcome)

    def _settle(self, delivery: Delivery, outcome: Outcome) -> None:
        channel = self._channel
        if channel is None or channel is not delivery.channel or not channel.is_open:
            return  # its channel is gone: the broker delivers it again
        if outcome.reply is not None and delivery.properties.reply_to:
            self._publish_reply(channel, delivery, outcome.reply)
        if outcome.settle is Settle.DEAD:
            self._publish_dead_letter(channel, delivery, outcome.reason)
            return  # acked once the dead letter is confirmed
        self._pending -= 1
        if outcome.settle is Settle.ACK:
            channel.basic_ack(delivery.delivery_tag)
            self.applied += 1
        elif not self._stopping.is_set():  # not expected: LEAVE comes from stopping
            channel.basic_nack(delivery.delivery_tag, requeue=True)

    def _publish_reply(self, channel: Any, delivery: Delivery, reply: Reply) -> None:
        props = delivery.properties
        channel.basic_publish(
            exchange="",
            routing_key=props.reply_to,
            body=json.dumps(reply, separators=(",", ":")).encode(),
            properties=pika.BasicProperties(
                content_type="application/json", correlation_id=props.correlation_id
            ),
        )
        self._publish_seq += 1
        self.replied += 1

    def _publish_dead_letter(self, channel: Any, delivery: Delivery, reason: str) -> None:
        props = delivery.properties
        # The token stays out of the dead-letter queue, whoever may read it.
        kept = {k: v for k, v in (props.headers or {}).items() if k != AUTH_HEADER}
        headers = {**kept, ERROR_HEADER: reason}
        channel.basic_publish(
            exchange="",
            routing_key=self.dead_queue,
            body=delivery.body,
            properties=_with_headers(props, headers),
            mandatory=True,
        )
        self._publish_seq += 1
        self._dead_letters[self._publish_seq] = delivery

    def _on_return(self, _channel: Any, method: Any, _props: Any, _body: bytes) -> None:
        # Only dead letters are mandatory: their queue is gone. Reconnecting
        # declares it again, and the unacked originals are delivered again.
        log.error(
            "dead letter returned (%s %s); reconnecting", method.reply_code, method.reply_text
        )
        self._close()

    def _on_confirm(self, frame: Any) -> None:
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
                log.error("dead letter not confirmed; reconnecting", extra=original.context())
                self._close()
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
        conn = self._conn
        if conn is None:
            return
        if self._pending <= 0 or time.monotonic() >= self._deadline_s:
            self._close()
            return
        conn.ioloop.call_later(_STOP_CHECK_S, self._check_stopped)


def _with_headers(props: Any, headers: Mapping[str, object]) -> Any:
    """A copy of ``props`` with ``headers`` replaced, without ``expiration`` (a
    dead letter is kept until someone looks at it) and ``user_id`` (the broker
    accepts only the publishing connection's own user)."""
    fields = {name: getattr(props, name) for name in _COPIED_PROPERTIES}
    return pika.BasicProperties(headers=dict(headers), **fields)
