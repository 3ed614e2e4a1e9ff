"""The webhook bridge: events consumed from RabbitMQ, POSTed to their targets
(docs/webhooks.md; docs/design/shared-service.md, section 3).

The engine publishes every event to ``exchange`` as always; each target has
a durable queue of its own (``<queue_prefix><name>``) bound there with its
routing-key patterns, and a :class:`TargetBridge` that consumes it:

* the queue's :class:`~triggerhook.amqp.consumer.QueueConsumer` (its own
  connection and I/O thread; prefetch = the target's ``concurrency``) hands
  each delivery to a bounded work queue (never more than the prefetch);
* ``concurrency`` delivery threads, each with a
  :class:`~triggerhook.local.sinks.WebhookSink` of its own, POST it: a 2xx is
  acked; a failure a retry may help (5xx, 408, 429, no answer by the
  deadline, no connection) is tried again after the back-off (or the
  answer's Retry-After), the message unacked meanwhile, up to
  ``max_attempts``; then, or at once for one no retry helps (another 4xx,
  an address not allowed), it is dead-lettered (``dead_letter_routing_key``
  on ``exchange``, the engine's dead-letter headers, cause
  ``webhook_failed``) and acked once the broker confirmed the dead letter.

A crash, a lost connection or a stop leaves what is in flight unacked: the
broker delivers it again (at least once; receivers dedupe by
``x-message-id``). A slow target fills its own slots and queue only.

Threads: the consumer's I/O thread owns the channel (and calls
:meth:`TargetBridge._on_message`); each delivery thread owns its sink and
the attempts of the delivery it holds; :meth:`stop` comes from the
service's thread and only sets the stop event and cuts the calls in flight.
"""

from __future__ import annotations

import logging
import math
import queue
import random
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from triggerhook.amqp.connection import AmqpNodes
from triggerhook.amqp.consumer import Delivery, QueueConsumer, Settle, Settlement, Topology
from triggerhook.domain.event import DEAD_ATTEMPTS, DEAD_CAUSE, DEAD_REASON, DEAD_ROUTING_KEY
from triggerhook.domain.meta import HeaderValue
from triggerhook.domain.webhooks import DEAD_CAUSE as WEBHOOK_FAILED
from triggerhook.domain.webhooks import WebhookTarget, backoff_ms
from triggerhook.local.sinks import Event, Undelivered, WebhookSink
from triggerhook.ratelimit import RateLimitedLog
from triggerhook.runtime.points import labelled
from triggerhook.runtime.worker import FailureHandler, name_os_thread

log = logging.getLogger(__name__)

TARGET_HEADER = "x-triggerhook-webhook"  # a dead letter's: the target that would not take it
_LOG_EVERY_S = 60.0
_CLOSE_GRACE_S = 2.0
COUNTERS = ("delivered", "retried", "dead_lettered", "refused_host")


@dataclass(frozen=True, slots=True)
class BridgeConfig:
    """What every target's consumer shares (from the settings)."""

    exchange: str
    queue_prefix: str
    dead_letter_routing_key: str
    dead_letter_queue: str  # declared and bound, as the publisher does ("": none)
    queue_arguments: Mapping[str, str]
    max_body_bytes: int | None = None


class TargetBridge:
    """One target: its queue's consumer and its delivery threads."""

    def __init__(
        self,
        target: WebhookTarget,
        secrets: tuple[bytes, ...],
        config: BridgeConfig,
        nodes: AmqpNodes,
        on_failure: FailureHandler,
        rng: random.Random | None = None,
    ) -> None:
        self.target = target
        self.queue = config.queue_prefix + target.name
        self._on_failure = on_failure
        self._rng = rng or random.Random()  # delivery threads: random.Random is thread-safe
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # guards counts
        self.counts = dict.fromkeys(COUNTERS, 0)
        self._log = RateLimitedLog(log, _LOG_EVERY_S)
        self._broker = QueueConsumer(
            nodes,
            self.queue,
            config.dead_letter_queue,
            target.concurrency,
            on_message=self._on_message,
            on_end=self._end_work,
            on_failure=on_failure,
            error_header=DEAD_REASON,
            name=f"th-wh-{target.name}"[:15],
            queue_arguments=config.queue_arguments,
            max_body_bytes=config.max_body_bytes,
            topology=Topology(config.exchange, target.routing_keys, config.dead_letter_routing_key),
            what=f"webhook {target.name}",
            consuming=f"webhook {target.name}: consuming events",
        )
        self._sinks = [
            WebhookSink(
                target.url, target.timeout_s, allow_private=target.allow_private, secrets=secrets
            )
            for _ in range(target.concurrency)
        ]
        # Bounded by the prefetch: the broker hands over no more unacked at once.
        self._work: queue.SimpleQueue[Delivery | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    # -- the service's thread --------------------------------------------------------

    def start(self) -> None:
        self._threads = [
            threading.Thread(
                target=self._work_loop,
                args=(sink,),
                name=f"th-wh{n}-{self.target.name}"[:15],
                daemon=True,
            )
            for n, sink in enumerate(self._sinks)
        ]
        for thread in self._threads:
            thread.start()
        self._broker.start()

    def stop(self, timeout_s: float) -> None:
        """Stop: the calls in flight are cut, waits for a retry end; what is
        not settled by then stays unacked (the broker delivers it again)."""
        self._stopping.set()
        now_s = time.monotonic()
        for sink in self._sinks:
            sink.cut(now_s)
        self._broker.finish(timeout_s)

    def join(self, timeout_s: float) -> bool:
        deadline_s = time.monotonic() + timeout_s
        self._broker.join(max(0.0, deadline_s - time.monotonic()))
        for thread in self._threads:
            thread.join(max(0.0, deadline_s - time.monotonic()))
        alive = self._broker.is_alive() or any(t.is_alive() for t in self._threads)
        if not alive:
            for sink in self._sinks:
                sink.close()
        return not alive

    def is_connected(self) -> bool:
        return self._broker.is_connected()

    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    # -- the consumer's I/O thread ----------------------------------------------------

    def _on_message(self, delivery: Delivery) -> None:
        self._work.put(delivery)

    def _end_work(self) -> None:
        for _ in self._threads:
            self._work.put(None)

    # -- delivery threads ---------------------------------------------------------------

    def _work_loop(self, sink: WebhookSink) -> None:
        name_os_thread(threading.current_thread().name)
        try:
            while (delivery := self._work.get()) is not None:
                self._broker.post(delivery, self.deliver(sink, delivery))
        except BaseException as exc:
            log.critical("webhook delivery thread failed: %r", exc, exc_info=exc)
            self._on_failure(threading.current_thread().name, exc)

    def deliver(self, sink: WebhookSink, delivery: Delivery) -> Settlement:
        """Every attempt ``delivery`` gets here, and how it is settled."""
        event = event_of(delivery)
        attempt = 0
        while True:
            # Stopping: a call begun now would not be cut. Its channel gone
            # (the connection was lost): the broker delivers it again anyway.
            if self._stopping.is_set() or not self._broker.is_current(delivery):
                return Settlement(Settle.LEAVE)
            attempt += 1
            failure = self._attempt(sink, event, delivery)
            if failure is None:
                return Settlement(Settle.ACK)
            if self._stopping.is_set():
                return Settlement(Settle.LEAVE)
            if not failure.retry or attempt >= self.target.max_attempts:
                return self._dead(delivery, failure, attempt)
            wait_s = self._wait_s(failure, attempt)
            self._count("retried")
            self._log.warning(
                f"retry {self.target.name}",
                "webhook %s: %s; attempt %d of %d, next in %.1f s",
                self.target.name,
                failure,
                attempt,
                self.target.max_attempts,
                wait_s,
                extra={"task_id": event.message_id},
            )
            if self._stopping.wait(wait_s):
                return Settlement(Settle.LEAVE)

    def _attempt(self, sink: WebhookSink, event: Event, delivery: Delivery) -> Undelivered | None:
        if delivery.body_size != len(delivery.body):  # over the limit: only its start is held
            return Undelivered(f"body of {delivery.body_size} bytes is over the limit", retry=False)
        try:
            sink.deliver(event, math.inf)
        except Undelivered as exc:
            return exc
        self._count("delivered")
        return None

    def _wait_s(self, failure: Undelivered, attempt: int) -> float:
        target = self.target
        if failure.retry_after_s is not None:
            return min(failure.retry_after_s, target.backoff_max_ms / 1000)
        return (
            backoff_ms(attempt, target.backoff_initial_ms, target.backoff_max_ms, self._rng) / 1000
        )

    def _dead(self, delivery: Delivery, failure: Undelivered, attempts: int) -> Settlement:
        self._count("dead_lettered")
        if failure.host_refused:
            self._count("refused_host")
        reason = f"{failure} (target {self.target.name}, attempts: {attempts})"
        log.error(
            "webhook %s: dead-lettered: %s",
            self.target.name,
            reason,
            extra={"task_id": delivery.message_id, "routing_key": delivery.routing_key},
        )
        headers: tuple[tuple[str, object], ...] = (
            (DEAD_CAUSE, WEBHOOK_FAILED),
            (DEAD_ATTEMPTS, attempts),
            (DEAD_ROUTING_KEY, delivery.routing_key),
            (TARGET_HEADER, self.target.name),
        )
        return Settlement(Settle.DEAD, None, reason, headers)

    def _count(self, name: str) -> None:
        with self._lock:
            self.counts[name] += 1


class WebhookBridge:
    """Every target's :class:`TargetBridge`, started and stopped together."""

    def __init__(self, targets: Collection[TargetBridge]) -> None:
        self.targets = tuple(targets)

    def start(self) -> None:
        for target in self.targets:
            target.start()
        names = ", ".join(t.target.name for t in self.targets)
        log.info("webhook bridge: %d target(s): %s", len(self.targets), names)

    def stop(self, timeout_s: float) -> None:
        deadline_s = time.monotonic() + timeout_s
        for target in self.targets:
            target.stop(timeout_s)
        for target in self.targets:
            target.join(max(0.0, deadline_s - time.monotonic()) + _CLOSE_GRACE_S)

    def is_connected(self) -> bool:
        return all(target.is_connected() for target in self.targets)

    def counters(self) -> dict[str, dict[str, int]]:
        """Per target's name, its counters (:data:`COUNTERS`)."""
        return {target.target.name: target.counters() for target in self.targets}

    def totals(self) -> dict[str, int]:
        """The counters as the engine's totals (``webhook_<counter>:<target>``,
        ``/metrics``' labelled families; :meth:`Engine.count_also`)."""
        return {
            labelled(f"webhook_{counter}", name): value
            for name, counts in self.counters().items()
            for counter, value in counts.items()
        }


def event_of(delivery: Delivery) -> Event:
    """The event a delivery carries, as the sink sends it: its headers as
    HTTP can carry them (a table or a list is left out)."""
    headers: dict[str, HeaderValue] = {}
    for name, value in (delivery.headers or {}).items():
        text = _header_value(value)
        if text is not None:
            headers[name] = text
    props: Any = delivery.properties
    return Event(
        delivery.message_id or "",
        delivery.routing_key,
        headers,
        delivery.body,
        getattr(props, "content_type", None),
        getattr(props, "content_encoding", None),
    )


def _header_value(value: object) -> HeaderValue | None:
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, bytes):  # pika gives long strings so
        return value.decode("utf-8", "replace")
    if isinstance(value, dict | list) or value is None:
        return None
    return str(value)  # a float, a decimal, a timestamp
