"""The publisher thread of ``triggerhook dev``: fired tasks from the send
buffer to local sinks (stdout, a webhook) instead of RabbitMQ.

It keeps the AMQP publisher's promises, by the same policy
(:class:`~triggerhook.domain.delivery.DeliveryPolicy`) and the same headers
(:func:`~triggerhook.domain.event.event_headers`):

* Delivered (every sink took it: stdout printed it and a webhook answered
  2xx): the task goes to the confirmer, which deletes its row (or advances
  its series).
* Not delivered (by any sink: a non-2xx answer, counted as ``returned``; no
  answer, as ``nacked``): retried after the policy's back-off (the row is
  stored back unarmed), and after ``publish_max_attempts`` failures or
  ``publish_max_age_ms`` sent as a dead letter: the same event with the
  dead-letter routing key and headers saying why. A dead letter not
  delivered either waits the longest back-off and is tried again.
* Late by its late-fire policy at publish time: a dead letter (cause ``late``).

Each sink has a thread of its own (:class:`~triggerhook.local.lanes.SinkLane`):
an event goes to every sink at once, each takes events in order, and one that
is slow or fails holds up none of the others. A retry (or the dead letter
after the last failure) goes only to the sinks that have not taken that event
yet: stdout prints an event once although the webhook took three tries. That
memory is this process's (:data:`_TAKEN_MAX` events; gone at a restart, when
such an event is printed again). The send buffer's lease check (``take``)
applies as for AMQP: what it holds back is taken again later. A stop cuts what
is in flight at its deadline; what a sink has not taken by then goes back to
the send buffer (its row stays, and fires again).

Threads: the state here is the publisher thread's (``th-publisher``): the
engine's threads only start, wake and stop it and read its figures, and the
lanes' threads only call :meth:`LocalPublisher._report`, which hands an
outcome over through a deque.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from triggerhook.domain.delivery import LATE, Dead, DeadLetter, DeliveryPolicy, dead_copy
from triggerhook.domain.event import dead_letter_headers, event_headers
from triggerhook.domain.meta import HeaderValue, LatePolicy
from triggerhook.domain.task import Task
from triggerhook.interfaces import Clock, ConfirmSink, FiredSource, RetryHandler
from triggerhook.local.lanes import Delivery, SinkLane
from triggerhook.local.sinks import Event, EventSink, Undelivered
from triggerhook.ratelimit import RateLimitedLog
from triggerhook.runtime.counters import PublishTotals
from triggerhook.runtime.worker import FailureHandler, Worker

log = logging.getLogger(__name__)

_BATCH = 64  # tasks taken from the send buffer at once
_LOG_EVERY_S = 10.0  # one "not delivered" / "not fired" line per routing key this often
_TAKEN_MAX = 100_000  # events remembered as taken by some sinks only (oldest forgotten)
_LANE_JOIN_S = 0.5  # at the end: a sink still busy past the deadline (a stuck pipe) is left


@dataclass(frozen=True, slots=True)
class LocalConfig:
    """``late_policy``: for tasks that have none of their own; ``sink_capacity``:
    events waiting for one sink at most (``max_unconfirmed``): beyond it an
    event that sink has not taken counts as not delivered."""

    policy: DeliveryPolicy
    dead_letter_routing_key: str
    late_policy: LatePolicy
    sink_capacity: int = 5000


class LocalPublisher(Worker, PublishTotals):
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
        """``sinks``: each event goes to every one (each on a thread of its own,
        closed at the end); ``clock``: x-fired-ms and lateness, the database's time."""
        super().__init__("th-publisher", on_failure)
        PublishTotals.__init__(self)
        self._buffer = buffer
        self._confirms = confirms
        self._retry = retry
        self._config = config
        self._clock = clock
        self._lanes = [SinkLane(s, config.sink_capacity, self._report, on_failure) for s in sinks]
        self._wakeup = threading.Event()
        self._dead: deque[tuple[Task, Dead]] = deque()  # dead letters to send first
        # Appended by the lanes' threads, taken by this one (deque: thread-safe).
        self._reports: deque[tuple[Delivery, str, Undelivered | None]] = deque()
        self._unsettled: dict[Delivery, None] = {}  # in order; len() read by other threads
        # (task id, due_ms) -> the sinks that took that event (or its dead letter).
        self._taken: OrderedDict[tuple[str, int], set[str]] = OrderedDict()
        self._log = RateLimitedLog(log, _LOG_EVERY_S)

    # -- other threads --------------------------------------------------------

    def wake(self) -> None:
        self._wakeup.set()

    def start(self) -> None:
        for lane in self._lanes:
            lane.start()
        super().start()

    def stop(self, deadline_s: float | None = None) -> None:
        """As :meth:`Worker.stop`; a sink's call in flight ends by the deadline too."""
        super().stop(deadline_s)
        for lane in self._lanes:
            lane.limit(self._deadline_s)

    def finish(self, deadline_s: float) -> None:
        """Send what is buffered (and the dead letters), then stop; by ``deadline_s``."""
        self.stop(deadline_s)

    def is_connected(self) -> bool:
        return True  # nothing to connect to: a sink that fails fails one event

    def unconfirmed(self) -> int:
        return len(self._unsettled)

    # -- the thread -----------------------------------------------------------

    def run(self) -> None:
        try:
            while True:
                self._wakeup.clear()  # before the checks: a wake meanwhile is not lost
                self._settle_reports()
                if self._finished():
                    return
                if not self._send_some():
                    self.pause(self._wakeup, self._wait_s())  # beating: Worker.stalled
        finally:
            self._end()

    def _finished(self) -> bool:
        left = bool(self._dead) or len(self._buffer) > 0 or bool(self._unsettled)
        return self.stopping and (not left or self.past_deadline())

    def _wait_s(self) -> float | None:
        """Until a wake; when stopping, until the deadline at most (a sink may never report)."""
        return max(0.0, self._deadline_s - time.monotonic()) if self.stopping else None

    def _send_some(self) -> bool:
        """One dead letter, or a batch from the buffer; False: nothing to do."""
        if self._dead:
            self._send_dead(*self._dead.popleft())
            return True
        tasks = self._buffer.take(_BATCH)
        if not tasks:
            return len(self._buffer) > 0  # the gate held some back: the rest may go
        for index, task in enumerate(tasks):
            if self.past_deadline():  # left for the shard's next owner, as unpublished
                self._buffer.requeue_front(tasks[index:])
                break
            self._fire(task)
        return True

    def _end(self) -> None:
        """Stop the lanes; what no sink settled by now goes back to the buffer."""
        for lane in self._lanes:
            lane.stop()
        joined_by_s = time.monotonic() + _LANE_JOIN_S
        for lane in self._lanes:
            if not lane.join(max(0.0, joined_by_s - time.monotonic())):
                log.warning("sink %s still busy at the stop: left behind", lane.sink.name)
        self._settle_reports()
        if self._unsettled:
            self._buffer.requeue_front([delivery.task for delivery in self._unsettled])
            self._unsettled.clear()

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
        """To each sink that has not taken this event yet (all, for a first try)."""
        meta = task.meta
        event = Event(
            task.id, routing_key, headers, task.payload, meta.content_type, meta.content_encoding
        )
        self.published += 1
        delivery = Delivery(task, event, dead)
        taken = self._taken_by(task)
        for lane in self._lanes:
            if lane.sink.name in taken:
                continue
            if lane.submit(delivery):
                delivery.waiting += 1
            else:
                busy = f"{lane.sink.name}: {lane.capacity} events waiting already"
                delivery.failures.append(Undelivered(busy))
        if delivery.waiting:
            self._unsettled[delivery] = None
        else:
            self._settle(delivery)

    def _taken_by(self, task: Task) -> set[str]:
        """The sinks that took ``task``'s event on an earlier try."""
        key = (task.id, task.due_ms)
        if not task.attempts:  # a first try: a new event (an id used again, say)
            self._taken.pop(key, None)
            return set()
        return self._taken.get(key, set())

    def _report(self, delivery: Delivery, sink: str, error: Undelivered | None) -> None:
        """A lane's thread: ``sink`` took ``delivery`` (``error`` None) or not."""
        self._reports.append((delivery, sink, error))
        self._wakeup.set()

    def _settle_reports(self) -> None:
        while self._reports:
            delivery, sink, error = self._reports.popleft()
            delivery.waiting -= 1
            if error is None:
                self._remember(delivery.task, sink)
            else:
                delivery.failures.append(error)
            if delivery.waiting == 0:
                del self._unsettled[delivery]
                self._settle(delivery)

    def _remember(self, task: Task, sink: str) -> None:
        key = (task.id, task.due_ms)
        self._taken.setdefault(key, set()).add(sink)
        self._taken.move_to_end(key)
        if len(self._taken) > _TAKEN_MAX:
            self._taken.popitem(last=False)

    def _settle(self, delivery: Delivery) -> None:
        """Every sink it went to reported: delivered, or retried as the policy says."""
        task, failures = delivery.task, delivery.failures
        if not failures:
            self._taken.pop((task.id, task.due_ms), None)
            self.confirmed += 1
            self.dead_lettered += delivery.dead
            self._confirms.confirmed([task])
            return
        refused = any(failure.refused for failure in failures)
        self.returned += refused
        self.nacked += not refused
        retry = any(failure.retry for failure in failures)
        self._undelivered(task, "; ".join(map(str, failures)), delivery.dead, retry)

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

    def _undelivered(self, task: Task, reason: str, was_dead: bool, retry: bool = True) -> None:
        """Retry later, or send a dead letter now, as the policy says."""
        now_ms = self._clock.now_ms()
        decision = self._config.policy.after_failure(task, reason, now_ms, was_dead, retry)
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
