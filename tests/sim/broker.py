"""The publisher side of a simulated instance, and the broker it talks to.

:class:`SimPublisher` stands where the AMQP publisher does (the engine's
``EventPublisher``): it takes fired tasks from the send buffer (whose gate
is the engine's lease check), screens them by the same
:class:`~triggerhook.domain.delivery.DeliveryPolicy`, and publishes them with
pipelined confirms. What the broker then does is the world's choice, seeded:

* **ack** the oldest outstanding publishes (``multiple``), or one out of order;
* **nack** one, or **return** one as unroutable (then ack it, as RabbitMQ
  does): not delivered; the policy retries it later (the engine stores it back)
  or sends a dead letter;
* **drop the connection** with publishes outstanding: each of them may have
  reached its queue or not (seeded: the adversary picks); the publisher puts
  them back at the front of the send buffer and publishes them again after
  reconnecting, as :class:`~triggerhook.amqp.publisher.AmqpPublisher` does.

Every publish that reached a queue is reported to the :class:`Deliveries`
sink (the oracle) with the database's true time at the publish, so the
oracle judges "never early" and "never after a cancel" by the database's
clock, not by the instance's estimate.

Threads: none; the world calls every method from its one thread.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from triggerhook.domain.delivery import DeadLetter, DeliveryPolicy, dead_copy
from triggerhook.domain.meta import FIRE
from triggerhook.domain.task import Task
from triggerhook.interfaces import Clock, ConfirmSink, FiredSource, RetryHandler

_SLICE = 64  # publishes per step, as the AMQP publisher's slice per I/O turn


@dataclass(frozen=True, slots=True)
class Published:
    """One event as it reached a queue."""

    task: Task
    instance: str
    db_ms: float  # the database's true time when it was published
    fired_ms: int  # its x-fired-ms: the instance's estimate then
    dead: bool  # a dead letter (with the dead-letter routing key)


class Deliveries(Protocol):
    def delivered(self, event: Published) -> None: ...

    def confirmed(self, event: Published) -> None: ...


@dataclass(slots=True)
class _InFlight:
    event: Published
    returned: bool = False


class SimPublisher:
    """An ``EventPublisher`` whose broker is the simulated world."""

    def __init__(
        self,
        instance: str,
        buffer: FiredSource,
        confirms: ConfirmSink,
        retry: RetryHandler,
        clock: Clock,
        db_now_ms: Callable[[], float],
        sink: Deliveries,
        policy: DeliveryPolicy,
    ) -> None:
        self._instance = instance
        self._buffer = buffer
        self._confirms = confirms
        self._retry = retry
        self._clock = clock
        self._db_now_ms = db_now_ms
        self._sink = sink
        self._policy = policy
        self._late = FIRE  # the default late-fire policy: fire however late
        self._unconfirmed: deque[_InFlight] = deque()
        self._dead: deque[Task] = deque()  # dead letters to publish first
        self.connected = True
        self.counts: dict[str, int] = dict.fromkeys(
            ("published", "confirmed", "returned", "nacked", "dead_lettered", "reconnects"), 0
        )

    # -- EventPublisher, as the engine drives it ---------------------------------

    def start(self) -> None:
        """Nothing to start: the world steps it."""

    def wake(self) -> None:
        """The world steps it when it likes."""

    def finish(self, deadline_s: float) -> None:
        """Not used: the world never stops an instance gracefully."""

    def join(self, timeout_s: float | None = None) -> bool:
        return True

    def is_alive(self) -> bool:
        return True

    def stalled(self, now_s: float, max_silence_s: float) -> bool:
        return False  # the world steps it: never wedged

    def is_connected(self) -> bool:
        return self.connected

    def unconfirmed(self) -> int:
        return len(self._unconfirmed)

    def counters(self) -> Mapping[str, int]:
        return dict(self.counts)

    def take_lateness(self) -> list[float]:
        return []

    # -- the publisher's thread ---------------------------------------------------

    def step(self) -> bool:
        """Publish dead letters, then a slice of the send buffer; False: nothing."""
        if not self.connected:
            return False
        sent = False
        while self._dead:
            self._publish(self._dead.popleft(), dead=True)
            sent = True
        for task in self._buffer.take(_SLICE):
            why = self._policy.screen(task, int(self._clock.now_ms()), self._late)
            if why is not None:
                self._dead.append(task)
                continue
            self._publish(task, dead=False)
            sent = True
        return sent

    def _publish(self, task: Task, dead: bool) -> None:
        fired_ms = int(self._clock.now_ms())
        event = Published(task, self._instance, self._db_now_ms(), fired_ms, dead)
        self._unconfirmed.append(_InFlight(event))
        self.counts["published"] += 1

    # -- the broker's answers (the world chooses) ------------------------------------

    def has_outstanding(self) -> bool:
        return bool(self._unconfirmed)

    def ack_oldest(self, count: int) -> None:
        """A (multiple) ack of the ``count`` oldest outstanding publishes."""
        settled = [self._unconfirmed.popleft() for _ in range(min(count, len(self._unconfirmed)))]
        self._settled(settled)

    def ack_one(self, rng: random.Random) -> None:
        """An ack of one outstanding publish, out of order."""
        if self._unconfirmed:
            index = rng.randrange(len(self._unconfirmed))
            one = self._unconfirmed[index]
            del self._unconfirmed[index]
            self._settled([one])

    def nack_one(self, rng: random.Random) -> None:
        """A nack: the broker did not take it."""
        if self._unconfirmed:
            index = rng.randrange(len(self._unconfirmed))
            one = self._unconfirmed[index]
            del self._unconfirmed[index]
            self.counts["nacked"] += 1
            self._undelivered(one.event, "nacked by the broker")

    def return_one(self, rng: random.Random) -> None:
        """basic.return (unroutable); its ack comes later and retries it."""
        if self._unconfirmed:
            self._unconfirmed[rng.randrange(len(self._unconfirmed))].returned = True

    def drop_connection(self, rng: random.Random) -> None:
        """The connection dies with publishes outstanding: each reached its
        queue or not (the adversary picks); all go back to the front of the
        send buffer, to be published again (dead letters to the dead queue)."""
        for one in self._unconfirmed:
            if not one.returned and rng.random() < 0.5:
                self._sink.delivered(one.event)
        tasks = [one.event.task for one in self._unconfirmed if not one.event.dead]
        self._dead.extendleft(reversed([o.event.task for o in self._unconfirmed if o.event.dead]))
        self._buffer.requeue_front(tasks)
        self._unconfirmed.clear()
        self.connected = False

    def reconnect(self) -> None:
        if not self.connected:
            self.connected = True
            self.counts["reconnects"] += 1

    def _settled(self, settled: list[_InFlight]) -> None:
        delivered: list[Task] = []
        for one in settled:
            if one.returned:
                self.counts["returned"] += 1
                self._undelivered(one.event, "returned 312 NO_ROUTE")
                continue
            self._sink.delivered(one.event)
            self._sink.confirmed(one.event)
            delivered.append(one.event.task)
        if delivered:
            self.counts["confirmed"] += len(delivered)
            self.counts["dead_lettered"] += sum(1 for one in settled if one.event.dead)
            self._confirms.confirmed(delivered)

    def _undelivered(self, event: Published, reason: str) -> None:
        """As AmqpPublisher._undelivered: retry later, or a dead letter now."""
        task = event.task
        decision = self._policy.after_failure(task, reason, self._clock.now_ms(), event.dead)
        if isinstance(decision, DeadLetter):
            self._dead.append(dead_copy(task, decision)[0])
        else:
            self._retry(task, decision.delay_ms)
