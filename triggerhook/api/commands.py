"""The AMQP command channel: create, cancel and reschedule tasks, and pause,
resume, trigger and backfill a series, by message.

The daemon consumes the durable queue ``command_queue``. A command is a message
whose AMQP ``type`` is ``create``, ``cancel``, ``reschedule``, ``pause``,
``resume``, ``trigger`` or ``backfill`` and whose body is JSON shaped like the
HTTP API's bodies (:mod:`triggerhook.api.bodies`); all but create carry the
task's ``"id"`` (a backfill also ``from_ms`` and ``to_ms``).

* A command is acknowledged only after its change is committed, so a crash
  before the commit leaves it in the queue and the broker delivers it again.
* With ``reply_to`` set, the answer goes there (default exchange, routing key
  = ``reply_to``, same ``correlation_id``): ``{"ok": true, "id": ...}`` (a
  series' operation adds its ``outcome``, and a trigger's or backfill's
  ``copies``, as the HTTP API answers them) or ``{"ok": false, "error":
  {"code", "message", "field"?}}`` (``already_fired`` with ``fired_ms`` too).
  Outcomes (``conflict``, ``not_found``, ``too_late``, ``not_a_series``,
  ``already_fired``) are answers: replied and acked.
* Before the body is read (:mod:`triggerhook.api.command_auth`): with
  ``api_token`` set, a command without ``authorization: Bearer <token>`` or an
  allowed ``user_id`` is dead-lettered as ``unauthorized`` (no reply, nothing
  applied, a rate-limited warning), and one whose ``reply_to`` is not direct
  reply-to or a queue starting with ``command_reply_prefix`` as
  ``forbidden_reply_to``. Then a body declared (by its content header) over
  :func:`~triggerhook.api.command_messages.max_body_bytes` is refused as
  ``invalid`` (``body``), unparsed: only its first bytes were kept, and its
  dead letter carries only those (:mod:`triggerhook.amqp.content`).
* A malformed command (``malformed_json``, ``unknown_type``, ``invalid``) is
  published, body and properties unchanged plus the header
  ``x-triggerhook-error: <reason>`` (``expiration``, ``user_id`` and the
  ``authorization`` header dropped), to the durable queue
  ``<command_queue>.dead`` (with publisher confirms) and then acked: it is
  never retried. So is a command whose handling raised an unexpected error
  (``internal_error``, logged with its traceback) three times in a row; its
  reply and dead letter never carry the error's text (a driver's message).
* Transient failures (database down, read-only or full) are retried with
  back-off while running, never dead-lettered; at stop the command stays
  unacked and the broker delivers it again.

Delivery is at-least-once, so a command may be applied again if the daemon
dies between its commit and its ack: a create with an ``"id"`` (or, without
one, a valid ``message_id``, which becomes the task id) is then a no-op
answered ``created: false`` (``already_fired`` when the task has a dedup
window and fired in between); a create with neither gets a new UUID and may
create a second task; a repeated cancel answers ``not_found``; a repeated
reschedule with ``delay`` moves the task again from the redelivery time; a
repeated pause, resume or backfill changes nothing more (a backfill's copies
answer ``exists``); a repeated trigger fires another copy (its id is the time).

Threads: the broker side is :class:`triggerhook.amqp.consumer.QueueConsumer`,
whose I/O thread declares the queues, takes messages, publishes replies and
dead letters and acks; this module is what a command means: the guard runs on
that thread, a small pool of worker threads runs the blocking library calls,
whose concurrent calls share group-commit transactions, and their outcomes go
back to the I/O thread through :meth:`QueueConsumer.post`.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import threading
import time

from triggerhook.amqp.connection import AmqpNodes
from triggerhook.amqp.consumer import Delivery, QueueConsumer, Settle, Settlement
from triggerhook.api.command_auth import AUTH_HEADER, LOG_INTERVAL_S, CommandGuard, Unauthorized
from triggerhook.api.command_messages import (
    Command,
    Rejected,
    Reply,
    execute,
    max_body_bytes,
    oversized,
)
from triggerhook.api.config import CommandConfig
from triggerhook.api.quotas import QuotaKeeper, keeper_of
from triggerhook.api.scoped import ScopedHook
from triggerhook.app import TriggerHook
from triggerhook.domain.namespaces import Principal
from triggerhook.domain.outcomes import Outcome
from triggerhook.errors import (
    EngineFailure,
    NotRunningError,
    SchemaError,
    TransientError,
)
from triggerhook.ratelimit import RateLimitedLog
from triggerhook.retry import Backoff
from triggerhook.runtime.worker import FailureHandler, name_os_thread

log = logging.getLogger(__name__)

ERROR_HEADER = "x-triggerhook-error"
MAX_WORKERS = 32
# Attempts at a command whose handling raised an unexpected error before it is
# dead-lettered as ``internal_error``.
UNEXPECTED_ATTEMPTS = 3
# Failures that are not the message's fault: retried, never dead-lettered.
_RETRIED = (TransientError, EngineFailure, SchemaError, NotRunningError)
_CLOSE_GRACE_S = 5.0  # beyond the stop deadline, for the connection to close

_LEAVE = Settlement(Settle.LEAVE)


def _outcome(
    delivery: Delivery, settle: Settle, reply: Reply | None, reason: str = ""
) -> Settlement:
    """The outcome of a command; its reply encoded only when one is asked for."""
    body = None
    if reply is not None and delivery.reply_to:
        body = json.dumps(reply, separators=(",", ":")).encode()
    return Settlement(settle, body, reason)


def _applied(delivery: Delivery, reply: Reply) -> dict[str, object]:
    """Logging ``extra`` of an applied command: the task named by its reply
    (the body, parsed once to apply it, is not parsed again for a log line)."""
    extra: dict[str, object] = {"type": delivery.type, "message_id": delivery.message_id}
    if "id" in reply:
        extra["task_id"] = reply["id"]
    return extra


class CommandConsumer:
    """Consumes ``config.queue`` and applies the commands to ``hook``.

    ``stop(timeout_s)`` stops taking messages, lets those being applied commit
    and be acked (until the timeout; the rest stay unacked, so the broker
    delivers them again), closes the connection and returns. ``on_failure``
    is called only if a thread of the consumer dies of a bug. ``nodes``: the
    broker's connection parameters, parsed once where the process is wired
    (the publisher uses the same).
    """

    def __init__(
        self,
        hook: TriggerHook,
        config: CommandConfig,
        nodes: AmqpNodes,
        on_failure: FailureHandler,
        quotas: QuotaKeeper | None = None,
    ) -> None:
        """``quotas``: the process's (None: one of its own)."""
        self._hook = hook
        self._quotas = quotas or keeper_of(hook)
        self._on_failure = on_failure
        self.queue = config.queue
        self.dead_queue = f"{config.queue}.dead"
        self._prefetch = config.prefetch
        self._body_limit = max_body_bytes(config.max_payload_bytes)
        self._guard = CommandGuard(config)
        self._refusals_log = RateLimitedLog(log, LOG_INTERVAL_S)  # one line per kind
        self._rejections_log = RateLimitedLog(log, LOG_INTERVAL_S)
        if not self._guard.authenticates and config.allowed_users:
            log.warning(
                "command_allowed_users is ignored: api_token and namespaces_file are empty, "
                "so commands are "
                "not authenticated (the vhost's permissions are the only guard)"
            )
        self._stopping = threading.Event()
        self._broker = QueueConsumer(
            nodes,
            self.queue,
            self.dead_queue,
            self._prefetch,
            on_message=self._on_message,
            on_end=self._end_work,
            on_failure=on_failure,
            error_header=ERROR_HEADER,
            # The token stays out of the dead-letter queue, whoever may read it.
            private_headers=(AUTH_HEADER,),
            queue_arguments=config.queue_arguments,
            # A larger body is not even held (only its first bytes, for its dead letter).
            max_body_bytes=self._body_limit,
        )
        # Each command with who it acts as (the guard's answer on the I/O thread).
        self._work: queue.SimpleQueue[tuple[Delivery, Principal] | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self.refused = 0  # dead-lettered by the guard: unauthorized, or a forbidden reply_to

    # -- counters (the broker side counts what it settles) --------------------------

    @property
    def received(self) -> int:
        return self._broker.received

    @property
    def applied(self) -> int:
        return self._broker.applied

    @property
    def dead_lettered(self) -> int:
        return self._broker.dead_lettered

    @property
    def replied(self) -> int:
        return self._broker.replied

    @property
    def reconnects(self) -> int:
        return self._broker.reconnects

    # -- other threads ----------------------------------------------------------

    def start(self) -> None:
        count = max(1, min(self._prefetch, MAX_WORKERS))
        self._workers = [
            threading.Thread(target=self._work_loop, name=f"th-command-{n}", daemon=True)
            for n in range(count)
        ]
        for worker in self._workers:
            worker.start()
        self._broker.start()

    def stop(self, timeout_s: float) -> None:
        """Stop consuming; wait up to ``timeout_s`` for commands in flight."""
        self._stopping.set()
        self._broker.finish(timeout_s)
        self.join(timeout_s + _CLOSE_GRACE_S)
        self._quotas.close()

    def join(self, timeout_s: float | None = None) -> bool:
        deadline = math.inf if timeout_s is None else time.monotonic() + timeout_s

        def left() -> float | None:
            return None if deadline == math.inf else max(0.0, deadline - time.monotonic())

        self._broker.join(left())
        for thread in self._workers:
            thread.join(left())
        return not self._broker.is_alive() and not any(t.is_alive() for t in self._workers)

    def is_alive(self) -> bool:
        return self._broker.is_alive()

    def is_connected(self) -> bool:
        return self._broker.is_connected()

    # -- worker threads -----------------------------------------------------------

    def _work_loop(self) -> None:
        name_os_thread(threading.current_thread().name)
        try:
            while (work := self._work.get()) is not None:
                delivery, principal = work
                self._broker.post(delivery, self._process(delivery, principal))
        except BaseException as exc:
            log.critical("command worker failed: %r", exc, exc_info=exc)
            self._on_failure(threading.current_thread().name, exc)

    def _process(self, delivery: Delivery, principal: Principal) -> Settlement:
        """Apply the command as ``principal`` (retried while not applied)."""
        command = Command(delivery.type, delivery.body, delivery.message_id, delivery.redelivered)
        hook = ScopedHook(self._hook, principal, self._quotas)
        backoff: Backoff | None = None  # made on the first failure: seeding costs
        unexpected = 0
        while not self._stopping.is_set() and self._broker.is_current(delivery):
            try:
                outcome = self._attempt(hook, command, delivery)
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
                    rejected = Rejected.of(Outcome.INTERNAL)
                    return _outcome(delivery, Settle.DEAD, rejected.reply(), rejected.reason)
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

    def _attempt(self, hook: ScopedHook, command: Command, delivery: Delivery) -> Settlement:
        try:
            reply = execute(hook, command, self._body_limit)
        except Rejected as exc:
            return self._rejected(delivery, exc)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("command applied: %s", reply, extra=_applied(delivery, reply))
        return _outcome(delivery, Settle.ACK, reply)

    # -- the I/O thread ------------------------------------------------------------

    def _on_message(self, delivery: Delivery) -> None:
        # Here, not on a worker: a header lookup and a digest comparison, so
        # a flood of unauthorized commands never reaches the body parser.
        try:
            principal = self._guard.check(delivery.headers, delivery.user_id, delivery.reply_to)
        except Rejected as exc:
            self._refuse(delivery, exc)
            return
        if delivery.body_size > self._body_limit:
            # Its content header said so: the body was never held, only its start.
            self._reject(delivery, oversized(delivery.body_size, self._body_limit))
            return
        self._work.put((delivery, principal))

    def _rejected(self, delivery: Delivery, exc: Rejected) -> Settlement:
        """A malformed command's settlement: its reply, and dead-lettered."""
        # Anyone who may publish can send these at will: one line per kind.
        self._rejections_log.warning(
            exc.code, "command rejected: %s", exc.reason, extra=delivery.context()
        )
        return _outcome(delivery, Settle.DEAD, exc.reply(), exc.reason)

    def _reject(self, delivery: Delivery, exc: Rejected) -> None:
        """Dead-letter a malformed command on the I/O thread, with its reply."""
        self._broker.settle(delivery, self._rejected(delivery, exc))

    def _refuse(self, delivery: Delivery, exc: Rejected) -> None:
        """Dead-letter a command the guard refused, without a reply."""
        self.refused += 1
        what = (
            "unauthorized command dead-lettered"
            if isinstance(exc, Unauthorized)
            else "command with a forbidden reply_to dead-lettered"
        )
        self._refusals_log.warning(
            what,
            "%s: %s",
            what,
            exc.message,
            extra={"type": delivery.type, "message_id": delivery.message_id},
        )
        self._broker.settle(delivery, Settlement(Settle.DEAD, None, exc.reason))

    def _end_work(self) -> None:
        """The I/O thread ended: so do the workers, once done with what they hold."""
        for _ in self._workers:
            self._work.put(None)
