"""The publisher thread of ``triggerhook dev``: fired tasks from the send
buffer to local sinks (stdout, a webhook) instead of RabbitMQ.

It keeps the AMQP publisher's promises, by the same policy
(:class:`~triggerhook.domain.delivery.DeliveryPolicy`) and the same headers
(:func:`~triggerhook.domain.event.event_headers`):

* Delivered (every sink took it: a webhook answered 2xx): the task goes to the
  confirmer, which deletes its row (or advances its series).
* Not delivered (a non-2xx answer, counted as ``returned``; no answer, as
  ``nacked``): retried after the policy's back-off (the row is stored back
  unarmed), and after ``publish_max_attempts`` failures or
  ``publish_max_age_ms`` sent as a dead letter: the same event with the
  dead-letter routing key and headers saying why, to the same sinks. A dead
  letter not delivered either waits the longest back-off and is tried again.
* Late by its late-fire policy at publish time: a dead letter (cause ``late``).

One event at a time, in order: the sinks are local and a webhook call is
bounded by its timeout. The send buffer's lease check (``take``) applies as
for AMQP: what it holds back is taken again later.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from triggerhook.domain.delivery import LATE, Dead, DeadLetter, DeliveryPolicy, dead_copy
from triggerhook.domain.event import dead_letter_headers, event_headers
from triggerhook.domain.meta import HeaderValue, LatePolicy
from triggerhook.domain.task import Task
from triggerhook.interfaces import Clock, ConfirmSink, FiredSource, RetryHandler
from triggerhook.local.sinks import Event, EventSink, Undelivered
from triggerhook.ratelimit import RateLimitedLog
from triggerhook.runtime.counters import Samples
from triggerhook.runtime.worker import FailureHandler, Worker

log = logging.getLogger(__name__)

_BATCH = 64  # tasks taken from the send buffer at once
_LOG_EVERY_S = 10.0  # one "not delivered" / "not fired" line per routing key this often


@dataclass(frozen=True, slots=True)
class LocalConfig:
    """``late_policy``: for tasks that have none of their own."""

    policy: DeliveryPolicy
    dead_letter_routing_key: str
    late_policy: LatePolicy


class LocalPublisher(Worker):
    def __init__(
        self,
        buffer: FiredSource,
        confirms: ConfirmSink,
        retry: RetryHandler,
        on_failure: FailureHandler,
        sinks: Sequence[EventSink],
        config: LocalConfig,
        clock: Clock,
    ) -> None:
        """``sinks``: each event goes to every one, in order (the first that
        fails stops it); ``clock``: x-fired-ms and lateness, the database's time."""
        super().__init__("th-publisher", on_failure)
        self._buffer = buffer
        self._confirms = confirms
        self._retry = retry
        self._sinks = list(sinks)
        self._config = config
        self._clock = clock
        self._wakeup = threading.Event()
        self._dead: deque[tuple[Task, Dead]] = deque()  # dead letters to send first
        self._in_flight = 0
        self._log = RateLimitedLog(log, _LOG_EVERY_S)
        self._lateness = Samples()  # appended by this thread, taken by the metrics thread
        self.published = 0
        self.confirmed = 0
        self.returned = 0
        self.nacked = 0
        self.dead_lettered = 0
        self.late_skipped = 0

    # -- other threads --------------------------------------------------------

    def wake(self) -> None:
        self._wakeup.set()

    def finish(self, deadline_s: float) -> None:
        """Send what is buffered (and the dead letters), then stop; by ``deadline_s``."""
        self.stop(deadline_s)

    def is_connected(self) -> bool:
        return True  # nothing to connect to: a sink that fails fails one event

    def unconfirmed(self) -> int:
        return self._in_flight

    def counters(self) -> dict[str, int]:
        return {
            "published": self.published,
            "confirmed": self.confirmed,
            "returned": self.returned,
            "nacked": self.nacked,
            "dead_lettered": self.dead_lettered,
            "late_skipped": self.late_skipped,
            "broker_reconnects": 0,
        }

    def take_lateness(self) -> list[float]:
        return self._lateness.take()

    # -- the thread -----------------------------------------------------------

    def run(self) -> None:
        try:
            while True:
                self._wakeup.clear()  # before the checks: a wake meanwhile is not lost
                if self._finished():
                    return
                if not self._send_some():
                    self._wakeup.wait()
        finally:
            for sink in self._sinks:
                sink.close()

    def _finished(self) -> bool:
        left = bool(self._dead) or len(self._buffer) > 0
        return self.stopping and (not left or self.past_deadline())

    def _send_some(self) -> bool:
        """One dead letter, or a batch from the buffer; False: nothing to do."""
        if self._dead:
            self._send_dead(*self._dead.popleft())
            return True
        tasks = self._buffer.take(_BATCH)
        if not tasks:
            return len(self._buffer) > 0  # the gate held some back: the rest may go
        self._in_flight = len(tasks)
        try:
            for index, task in enumerate(tasks):
                if self.past_deadline():  # left for the shard's next owner, as unpublished
                    self._buffer.requeue_front(tasks[index:])
                    break
                self._fire(task)
                self._in_flight -= 1
        finally:
            self._in_flight = 0
        return True

    def _fire(self, task: Task) -> None:
        fired_ms = int(self._clock.now_ms())
        why = self._config.policy.screen(task, fired_ms, self._config.late_policy)
        if why is not None:
            self._dead_letter(task, why)
            return
        self._lateness.record(fired_ms - task.due_ms)
        self._send(task, task.routing_key, event_headers(task, fired_ms), False)

    def _send_dead(self, task: Task, why: Dead) -> None:
        fired_ms = int(self._clock.now_ms())
        extra = dead_letter_headers(why.cause, why.reason, task.attempts, task.routing_key)
        headers = event_headers(task, fired_ms, extra)
        self._send(task, self._config.dead_letter_routing_key, headers, True)

    def _send(
        self, task: Task, routing_key: str, headers: dict[str, HeaderValue], dead: bool
    ) -> None:
        meta = task.meta
        event = Event(
            task.id, routing_key, headers, task.payload, meta.content_type, meta.content_encoding
        )
        self.published += 1
        try:
            for sink in self._sinks:
                sink.deliver(event)
        except Undelivered as exc:
            self.returned += exc.refused
            self.nacked += not exc.refused
            self._undelivered(task, str(exc), dead)
            return
        self.confirmed += 1
        self.dead_lettered += dead
        self._confirms.confirmed([task])

    def _dead_letter(self, task: Task, why: Dead) -> None:
        """The policy says no (failures ran out, or too late): a dead letter
        instead of the event."""
        self._dead.append((task, why))
        if why.cause == LATE:
            self.late_skipped += 1
            self._log.warning(
                f"late {task.routing_key}",
                "task not fired, %s: sent as a dead letter",
                why.reason,
                extra={"task_id": task.id, "routing_key": task.routing_key},
            )

    def _undelivered(self, task: Task, reason: str, was_dead: bool) -> None:
        """Retry later, or send a dead letter now, as the policy says."""
        decision = self._config.policy.after_failure(task, reason, self._clock.now_ms(), was_dead)
        if isinstance(decision, DeadLetter):
            self._dead.append(dead_copy(task, decision))
            then = "sending it as a dead letter"
        else:
            self._retry(task, decision.delay_ms)
            then = f"retrying in {decision.delay_ms} ms"
        what = "dead letter" if was_dead else "event"
        self._log.warning(
            task.routing_key,
            "%s not delivered (%s): %s",
            what,
            reason,
            then,
            extra={"task_id": task.id, "routing_key": task.routing_key},
        )
