"""The metrics thread: every period, collect the figures and write them out.

Threads: its own (``th-metrics``); it owns the collector, the buffer and the
sink. The engine never waits for it: a slow or unreachable InfluxDB only
delays this thread. Points wait in a bounded buffer while the sink is down;
beyond ``metrics_buffer_points`` the oldest are dropped, counted (the next
point's ``metrics_dropped``) and logged. Without a sink it still collects, so
``/v1/status`` and ``/metrics`` always have the latest figures.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

from triggerhook.errors import MetricsRejected, MetricsUnavailable
from triggerhook.interfaces import Clock, MetricsSink
from triggerhook.logs import redact
from triggerhook.metrics.collector import Collector
from triggerhook.retry import Backoff
from triggerhook.runtime.points import Point
from triggerhook.runtime.worker import Worker

log = logging.getLogger(__name__)

# While the sink is down, say so at most this often.
_COMPLAIN_EVERY_S = 60.0


class MetricsReporter(Worker):
    def __init__(
        self,
        clock: Clock,
        collector: Collector,
        sink: MetricsSink | None,
        interval_ms: int,
        buffer_points: int,
        join_timeout_s: float = 1.0,
    ) -> None:
        # A failure here must not stop the engine: run() handles every error.
        super().__init__("th-metrics", on_failure=lambda _name, _exc: None)
        self._clock = clock
        self.collector = collector
        self._sink = sink
        self._interval_s = interval_ms / 1000
        self._buffer: deque[Point] = deque()
        self._buffer_points = buffer_points
        self._wakeup = threading.Event()
        self._retry = Backoff(initial_s=self._interval_s, max_s=30.0)
        self._retry_at = 0.0  # time.monotonic() of the next write attempt
        self._complained_at: dict[str, float] = {}  # what -> when last logged
        self._unsent_dropped = 0  # dropped points not yet reported in a point
        self.dropped = 0
        self.written = 0
        self.collect_errors = 0
        # How long stopping waits for the final write (the sink's timeout and a second).
        self.join_timeout_s = join_timeout_s

    def wake(self) -> None:
        self._wakeup.set()

    def run(self) -> None:
        next_s = time.monotonic() + self._interval_s
        while True:
            self._wakeup.wait(max(0.0, next_s - time.monotonic()))
            if self.stopping:
                break
            next_s += self._interval_s
            if next_s < time.monotonic():  # fell behind (a slow write): skip ahead
                next_s = time.monotonic() + self._interval_s
            self.step(int(self._clock.now_ms()))
        self.step(int(self._clock.now_ms()), final=True)
        if self._sink is not None:
            self._sink.close()

    def step(self, now_ms: int, final: bool = False) -> None:
        """One period: collect, buffer, write (at most one attempt)."""
        try:
            collected = self.collector.collect(now_ms, self._unsent_dropped)
        except Exception:
            # Metrics must never take the daemon down; a bug here is logged loudly.
            self.collect_errors += 1
            log.exception("metrics: collecting failed")
            return
        self._unsent_dropped = 0
        if self._sink is None:
            return
        self._buffer.extend(collected)
        overflow = len(self._buffer) - self._buffer_points
        if overflow > 0:
            for _ in range(overflow):
                self._buffer.popleft()
            self._drop(overflow)
            self._complain(
                "dropped",
                f"metrics: InfluxDB unreachable for long; {self.dropped} points dropped so far",
            )
        if final or time.monotonic() >= self._retry_at:
            self._write()

    def _write(self) -> None:
        assert self._sink is not None
        batch = list(self._buffer)
        try:
            self._sink.write(batch)
        except MetricsUnavailable as exc:
            self._retry_at = time.monotonic() + self._retry.next_delay_s()
            # redact: a sink's error may quote its URL, credentials included.
            reason = redact(str(exc))
            self._complain(
                "down", f"metrics: InfluxDB unavailable, {len(batch)} points kept: {reason}"
            )
            return
        except MetricsRejected as exc:
            self._buffer.clear()
            self._drop(len(batch))
            log.error(
                "metrics: InfluxDB rejected %d points, dropped: %s", len(batch), redact(str(exc))
            )
            return
        self._buffer.clear()
        self.written += len(batch)
        if self._retry.attempt:
            log.info("metrics: InfluxDB reachable again; %d points written", len(batch))
            self._retry.reset()
            self._complained_at.clear()

    def _drop(self, count: int) -> None:
        self.dropped += count
        self._unsent_dropped += count

    def _complain(self, what: str, message: str) -> None:
        """Log ``message`` unless the same kind of trouble was logged recently."""
        now_s = time.monotonic()
        if now_s - self._complained_at.get(what, -_COMPLAIN_EVERY_S) >= _COMPLAIN_EVERY_S:
            self._complained_at[what] = now_s
            log.warning(message)
