"""The publisher thread: sends fired tasks to RabbitMQ with pipelined confirms.

It serves its connections on the shared :class:`ConnectionLoop` (connect,
serve, reconnect after the worker's back-off); other threads reach it only
through :meth:`AmqpPublisher.wake` (thread-safe callback). Messages are
persistent and ``mandatory``; up to ``max_unconfirmed`` are in flight at once.
It drives the scheduler (:meth:`AmqpPublisher.drive`): the scheduler's waits
are timers on this loop, so a due task is published by the wake that fires
it; between connections the due tasks wait in the scheduler's heap, as they
would in the send buffer.

* Ack: the task is handed to the confirmer, which deletes its row.
* Nack: besides the retry below, the channel is reopened (at most every
  ``_REOPEN_AFTER_NACK_S``): a channel opened while a quorum queue the event
  is routed to elects a leader (its node just died) nacks every publish for
  many seconds, though the other queues took each copy (measured on
  RabbitMQ 3.10: 7 s of nacks on such a channel, none on one opened before
  or after; a reopened one stopped at once). Its unconfirmed events are
  published again on the new channel.
* Return (unroutable) or Nack: :class:`DeliveryPolicy` decides. Retry: the
  row is stored back unarmed (the confirmer does it) and is armed again after
  a back-off, so meanwhile it can be cancelled and holds no room in memory (a
  row armed by a shard's previous owner stays armed and is retried from
  memory). Dead letter (after ``publish_max_attempts`` failures or
  ``publish_max_age_ms``): the event is published again at once with the
  dead-letter routing key and headers saying why; its row is deleted once that
  publish is confirmed. Logged per routing key, rate-limited; counted.
* Late: a task whose late-fire policy (its own, else the configured
  default) says it is too late by the clock at publish time is not fired but
  dead-lettered the same way (cause ``late``); counted as ``late_skipped``.
* Connection lost: every unconfirmed task goes back to the front of the send
  buffer and is published again after reconnecting (at-least-once).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import pika
import pika.channel
import pika.frame
import pika.spec

from triggerhook.amqp.connection import (
    AmqpNodes,
    CallSoonOnce,
    Confirm,
    ConnectionLoop,
    body_frame_max,
    read_confirms,
    write_frames,
)
from triggerhook.amqp.frames import dead_letter_headers, encode_event
from triggerhook.domain.delivery import LATE, Dead, DeadLetter, DeliveryPolicy, dead_copy
from triggerhook.domain.meta import LatePolicy
from triggerhook.domain.task import Task
from triggerhook.interfaces import Clock, ConfirmSink, DrivenTimer, FiredSource, RetryHandler
from triggerhook.ratelimit import RateLimitedLog
from triggerhook.runtime.counters import PublishTotals
from triggerhook.runtime.worker import FailureHandler, Worker

log = logging.getLogger(__name__)

_SLICE = 256  # messages published per I/O-loop turn, so acks are read in between
_FINISH_CHECK_S = 0.02
_LOG_EVERY_S = 10.0  # one "not delivered" line per routing key this often
_REOPEN_AFTER_NACK_S = 0.5  # a nack reopens a channel open at least this long


class AmqpPublisher(Worker, PublishTotals):
    def __init__(
        self,
        nodes: AmqpNodes,
        exchange: str,
        buffer: FiredSource,
        confirms: ConfirmSink,
        retry: RetryHandler,
        max_unconfirmed: int,
        on_failure: FailureHandler,
        policy: DeliveryPolicy,
        dead_letter_routing_key: str,
        dead_letter_queue: str,
        queue_arguments: Mapping[str, str],
        clock: Clock,
        late_policy: LatePolicy,
    ) -> None:
        """``late_policy``: for tasks that have none of their own;
        ``queue_arguments``: the dead-letter queue's (its type)."""
        super().__init__("th-publisher", on_failure)
        PublishTotals.__init__(self)
        self._clock = clock  # x-fired-ms and the lateness: the database's time
        self._loop = ConnectionLoop(nodes, self, "publishing", self._on_open, self._reset, log)
        self._exchange = exchange
        self._policy = policy
        self._dead_key = dead_letter_routing_key
        self._queue_arguments = queue_arguments
        self._dead_queue = dead_letter_queue
        self._late_policy = late_policy
        # Owned by the I/O thread: dead letters to publish, and those in flight
        # (task id -> cause and reason); they outlive a connection, like the send buffer.
        self._dead: deque[tuple[Task, Dead]] = deque()
        self._dead_unconfirmed: dict[str, Dead] = {}
        self._late_log = RateLimitedLog(log, _LOG_EVERY_S)
        self._undelivered_log = RateLimitedLog(log, _LOG_EVERY_S)
        self._buffer = buffer
        self._confirms = confirms
        self._retry = retry
        self._max_unconfirmed = max_unconfirmed
        self._lock = threading.Lock()
        self._channel: pika.channel.Channel | None = None
        self._channel_opened_s = 0.0  # time.monotonic() when it became ready
        self._reopening = False  # the channel is being closed to open a new one
        self._finish_checking = False
        self._next_tag = 0
        self._tags: deque[int] = deque()
        self._unconfirmed: dict[int, Task] = {}
        self._returned: dict[str, str] = {}  # task id -> why the broker returned it
        self.connected = threading.Event()
        self.channel_reopens = 0
        # The scheduler this loop times (drive), its pending timer on the
        # current connection, whether a tick runs (the I/O thread's).
        self._timer: DrivenTimer | None = None
        self._tick_at: object | None = None
        self._ticking = False
        self._drain_soon = CallSoonOnce(self._loop, self._drain)
        self._tick_soon = CallSoonOnce(self._loop, self._tick)

    # -- other threads --------------------------------------------------------

    def wake(self) -> None:
        """Ask the I/O loop to publish what is in the buffer (thread-safe)."""
        if not self._ticking:  # else the tick's own put, on the I/O thread: it drains next
            self._drain_soon()

    def drive(self, timer: DrivenTimer) -> None:
        """Before start: the scheduler's waits become timers on this I/O loop
        (:class:`~triggerhook.interfaces.TimerDriver`). A due task is then
        published by the wake that fires it — no hand-off to this thread, one
        wake instead of two. Pika's timers are whole milliseconds on poll
        (rounded up), so a fire lands within the millisecond after its due
        time; never before it (the tick checks the clock)."""
        self._timer = timer
        timer.drive_from(self._tick_soon)

    def finish(self, deadline_s: float) -> None:
        """Publish what is buffered, wait for its confirms, then stop (monotonic deadline)."""
        self.stop(deadline_s)

    def unconfirmed(self) -> int:
        return len(self._unconfirmed)

    def is_connected(self) -> bool:
        return self.connected.is_set()

    # -- the thread -----------------------------------------------------------

    def run(self) -> None:
        self._loop.run(lambda: self._finished() or self.past_deadline())

    def _finished(self) -> bool:
        return self.stopping and not self._buffer and not self._unconfirmed and not self._dead

    def _reset(self) -> None:
        """A connection ended: what was in flight on it goes back to be sent again."""
        with self._lock:
            self._finish_checking = False
        self._drain_soon.reset()
        self._tick_soon.reset()
        self._tick_at = None  # its loop is gone
        self._channel = None
        self.connected.clear()
        self._requeue_unconfirmed()

    def _requeue_unconfirmed(self) -> None:
        if self._unconfirmed:
            tasks = [self._unconfirmed[tag] for tag in self._tags if tag in self._unconfirmed]
            log.warning("republishing %d unconfirmed events after reconnect", len(tasks))
            dead = self._dead_unconfirmed
            self._dead.extendleft(reversed([(t, dead[t.id]) for t in tasks if t.id in dead]))
            self._buffer.requeue_front([t for t in tasks if t.id not in dead])
        self._dead_unconfirmed.clear()
        self._unconfirmed.clear()
        self._tags.clear()
        self._returned.clear()
        self._next_tag = 0

    # -- pika callbacks (I/O loop thread) -------------------------------------

    def _on_open(self, conn: pika.SelectConnection) -> None:
        read_confirms(conn, self._confirming_channel, self._confirmed)
        conn.channel(on_open_callback=self._on_channel_open)
        self._tick()  # what fell due meanwhile waits in the buffer, as it would

    def _tick(self) -> None:
        """The scheduler's round, then what it fired published, then the timer
        for its next (the I/O thread)."""
        timer = self._timer
        if timer is None:
            return
        if self._tick_at is not None:
            self._loop.cancel_timer(self._tick_at)
            self._tick_at = None
        self._ticking = True
        try:
            wait_s = timer.tick(self._clock.now_ms())
        finally:
            self._ticking = False
        self._drain()
        if wait_s is not None:
            self._tick_at = self._loop.call_later(wait_s, self._on_tick_timer)

    def _on_tick_timer(self) -> None:
        # It fired: nothing left to cancel. (Cancelling a timer pika is
        # running counts a cancellation pika never takes back from its heap,
        # and past a threshold it rebuilds its heap on every loop turn.)
        self._tick_at = None
        self._tick()

    def _confirming_channel(self) -> int | None:
        """The channel whose confirms ``read_confirms`` takes (None: pika reads them)."""
        channel = self._channel
        return None if channel is None or self._reopening else int(channel.channel_number)

    def _on_channel_open(self, channel: pika.channel.Channel) -> None:
        self._channel = channel
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_return_callback(self._on_return)
        channel.exchange_declare(
            exchange=self._exchange,
            exchange_type="topic",
            durable=True,
            callback=lambda _frame: self._declare_dead_letters(channel),
        )

    def _declare_dead_letters(self, channel: pika.channel.Channel) -> None:
        """The dead-letter queue, bound, so a dead letter is never unroutable."""

        def confirm(_frame: Any) -> None:
            channel.confirm_delivery(ack_nack_callback=self._on_confirm, callback=self._on_ready)

        if not self._dead_queue:
            confirm(None)
            return
        channel.queue_declare(
            queue=self._dead_queue,
            durable=True,
            arguments=dict(self._queue_arguments),
            callback=lambda _frame: channel.queue_bind(
                self._dead_queue, self._exchange, self._dead_key, callback=confirm
            ),
        )

    def _on_channel_closed(self, channel: pika.channel.Channel, reason: BaseException) -> None:
        self._channel = None
        if self.stopping:
            return
        conn = self._loop.connection
        if self._reopening and conn is not None and conn.is_open:
            self._reopening = False
            self._reset()  # what was in flight on it is sent again on the next
            conn.channel(on_open_callback=self._on_channel_open)
            return
        # e.g. the exchange exists with another type: log loudly, reconnect later.
        log.error("RabbitMQ channel closed: %s", reason)
        if conn is not None and conn.is_open:
            conn.close()

    def _on_ready(self, _frame: Any) -> None:
        if self._backoff.attempt:
            self.reconnects += 1
        self.succeeded("publishing")
        self._loop.opened()
        self._reopening = False
        self._channel_opened_s = time.monotonic()
        log.info("publishing to exchange %r at %s", self._exchange, self._loop.node)
        self.connected.set()
        self._drain()

    def _check_finish(self) -> None:
        """While stopping: close once everything is confirmed or time is up."""
        if self._loop.connection is None:
            return
        if self._finished() or self.past_deadline():
            self._loop.close()
            return
        self._loop.call_later(_FINISH_CHECK_S, self._check_finish)

    def _drain(self) -> None:
        with self._lock:
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
        if self._dead:
            budget -= self._publish_dead(channel, min(budget, _SLICE))
        tasks = self._buffer.take(min(budget, _SLICE))
        if not tasks:
            if len(self._buffer):  # the gate held some back: the rest may go
                self.wake()
            return
        self._publish(channel, tasks)
        if (len(self._buffer) and len(tasks) < budget) or self._dead:
            self.wake()

    def _publish(self, channel: pika.channel.Channel, tasks: list[Task]) -> None:
        conn = self._loop.connection
        if conn is None or not channel.is_open:
            self._buffer.requeue_front(tasks)
            return
        number = channel.channel_number
        exchange = self._exchange
        max_body = body_frame_max(conn)
        tags = self._tags
        unconfirmed = self._unconfirmed
        tag = self._next_tag
        frames = []
        record = self._lateness.record
        default_late = self._late_policy
        for task in tasks:
            fired_ms = int(self._clock.now_ms())
            why = self._policy.screen(task, fired_ms, default_late)
            if why is not None:
                self._dead_letter(task, why)
                continue
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
                    task.rev,
                    max_body,
                    meta=task.meta,
                )
            )
            tag += 1
            tags.append(tag)
            unconfirmed[tag] = task
        self._next_tag = tag
        self.published += len(frames)
        if frames:  # all of them may have gone to the dead letters
            write_frames(conn, [b"".join(frames)])

    def _publish_dead(self, channel: pika.channel.Channel, limit: int) -> int:
        """Publish up to ``limit`` dead letters (the rare path); returns how many."""
        conn = self._loop.connection
        if conn is None or not channel.is_open:
            return 0
        frames: list[bytes] = []
        max_body = body_frame_max(conn)
        while self._dead and len(frames) < limit:
            task, why = self._dead.popleft()
            fired_ms = int(self._clock.now_ms())
            extra = dead_letter_headers(why.reason, task.attempts, task.routing_key, why.cause)
            frames.append(
                encode_event(
                    channel.channel_number,
                    self._exchange,
                    self._dead_key,
                    task.payload,
                    task.id,
                    task.due_ms,
                    fired_ms,
                    task.rev,
                    max_body,
                    extra,
                    task.meta,
                )
            )
            self._next_tag += 1
            self._tags.append(self._next_tag)
            self._unconfirmed[self._next_tag] = task
            self._dead_unconfirmed[task.id] = why
        self.published += len(frames)
        if frames:
            write_frames(conn, [b"".join(frames)])
        return len(frames)

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
        """A confirm pika decoded (``read_confirms`` takes most of them first)."""
        method = frame.method
        self._confirmed(
            (method.delivery_tag, method.multiple, isinstance(method, pika.spec.Basic.Ack))
        )

    def _confirmed(self, confirm: Confirm) -> None:
        tag, multiple, acked = confirm
        settled = self._settle(tag, multiple)
        delivered: list[Task] = []
        returned = self._returned
        dead = self._dead_unconfirmed
        for task in settled:
            why = returned.pop(task.id, None) if returned else None
            dead_reason = dead.pop(task.id, None) if dead else None
            if acked and why is None:
                delivered.append(task)
                if dead_reason is not None:
                    self.dead_lettered += 1
            else:
                self.nacked += 0 if acked else 1
                self._undelivered(task, why or "nacked by the broker", dead_reason is not None)
        if delivered:
            self.confirmed += len(delivered)
            self._confirms.confirmed(delivered)
        if not acked:
            self._reopen_channel()
        self._drain()

    def _reopen_channel(self) -> None:
        """After a nack: close the channel, and open a new one once it closed
        (``_on_channel_closed``); not more often than every _REOPEN_AFTER_NACK_S."""
        channel = self._channel
        if channel is None or not channel.is_open or self._reopening:
            return
        if time.monotonic() - self._channel_opened_s < _REOPEN_AFTER_NACK_S:
            return
        self._reopening = True
        self.channel_reopens += 1
        log.warning(
            "the broker nacked an event: reopening the channel (one opened while a queue"
            " elected a leader nacks until reopened)"
        )
        channel.close()

    def _undelivered(self, task: Task, reason: str, was_dead: bool) -> None:
        """An event the broker did not take: retry it later, or dead-letter it now."""
        decision = self._policy.after_failure(task, reason, self._clock.now_ms(), was_dead)
        if isinstance(decision, DeadLetter):
            self._dead.append(dead_copy(task, decision))
            outcome = f"dead-lettered with routing key {self._dead_key!r}"
        else:
            self._retry(task, decision.delay_ms)
            outcome = f"retrying in {decision.delay_ms} ms"
        if was_dead:
            outcome = (
                "its dead letter was not delivered either (is a queue bound to "
                f"{self._dead_key!r}?); {outcome}"
            )
        self._undelivered_log.warning(
            task.routing_key,
            "event not delivered (%s): %s",
            reason,
            outcome,
            extra={
                "task_id": task.id,
                "routing_key": task.routing_key,
                "attempt": task.attempts + 1,
            },
        )

    def _dead_letter(self, task: Task, why: Dead) -> None:
        """The policy says no (failures ran out, or too late): a dead letter
        instead of the event; a late one is counted and logged."""
        self._dead.append((task, why))
        if why.cause != LATE:
            return
        self.late_skipped += 1
        self._late_log.warning(
            task.routing_key,
            "task not fired, %s: dead-lettered with routing key %r",
            why.reason,
            self._dead_key,
            extra={"task_id": task.id, "routing_key": task.routing_key},
        )

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
