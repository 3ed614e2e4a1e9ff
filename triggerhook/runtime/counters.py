"""Cheap counters for the engine's threads, read once per period by the
metrics thread. Pure: no I/O.

* :class:`Tally`: a monotonically growing count that several threads add to
  (a lock per ``add``: callers add once per batch, never per task).
* :class:`Samples`: values recorded by one thread (``list.append``, no lock)
  and taken by the metrics thread (a reference swap). A value appended in the
  instant of the swap may land in the list just taken, after it was read: one
  lost sample at worst, never a crash or a blocked writer.
* :func:`summary`: p50/p99/max of a period's samples.
* :class:`Histogram`: cumulative bucket counts of values since start (what
  Prometheus aggregates), fed by the metrics thread with each period's
  samples; :class:`HistogramSnapshot`, its immutable copy for readers.
* :class:`PublishTotals`: what a publisher (AMQP, or the dev mode's local
  one) counts since start, by the names the metrics read.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


class Tally:
    def __init__(self) -> None:
        self._value = 0
        self._lock = threading.Lock()

    def add(self, count: int = 1) -> None:
        if count:
            with self._lock:
                self._value += count

    @property
    def value(self) -> int:
        return self._value


class Samples:
    def __init__(self) -> None:
        self._values: list[float] = []

    def record(self, value: float) -> None:
        self._values.append(value)

    def extend(self, values: Iterable[float]) -> None:
        self._values.extend(values)

    def take(self) -> list[float]:
        """The values recorded since the last take."""
        taken, self._values = self._values, []
        return taken


def add_totals(into: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    """``more``'s counters added to ``into``'s, key by key (in place; returned)."""
    for key, value in more.items():
        into[key] = into.get(key, 0) + value
    return into


def quantile(ordered: list[float], q: float) -> float:
    """Nearest-rank quantile of an ascending, non-empty list."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(values: list[float], prefix: str) -> dict[str, float]:
    """``{prefix}_p50_ms``, ``_p99_ms``, ``_max_ms`` of ``values``; empty if none."""
    if not values:
        return {}
    ordered = sorted(values)
    return {
        f"{prefix}_p50_ms": float(quantile(ordered, 0.50)),
        f"{prefix}_p99_ms": float(quantile(ordered, 0.99)),
        f"{prefix}_max_ms": float(ordered[-1]),
    }


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """A histogram's counts at one moment: ``cumulative[i]`` values were at
    most ``bounds_ms[i]``; the last entry counts every value (``+Inf``)."""

    bounds_ms: tuple[float, ...]
    cumulative: tuple[int, ...]  # len(bounds_ms) + 1, non-decreasing
    sum_ms: float

    @property
    def count(self) -> int:
        return self.cumulative[-1]


class Histogram:
    """Counts of values per bucket since start. One writer (the metrics
    thread); readers take :meth:`snapshot`. O(1) per value: a bisect into the
    few bounds and an increment."""

    def __init__(self, bounds_ms: Sequence[float]) -> None:
        self._bounds_ms = tuple(sorted(bounds_ms))
        self._counts = [0] * (len(self._bounds_ms) + 1)  # the last: above every bound
        self._sum_ms = 0.0

    def observe_all(self, values_ms: Iterable[float]) -> None:
        bounds, counts = self._bounds_ms, self._counts
        total = 0.0
        for value in values_ms:
            counts[bisect_left(bounds, value)] += 1  # the first bound >= value
            total += value
        self._sum_ms += total

    def snapshot(self) -> HistogramSnapshot:
        cumulative: list[int] = []
        running = 0
        for count in self._counts:
            running += count
            cumulative.append(running)
        return HistogramSnapshot(self._bounds_ms, tuple(cumulative), self._sum_ms)


class RequestStats:
    """HTTP answers by status class and their handling times. Written by the
    event-loop thread only; read by the metrics thread."""

    def __init__(self) -> None:
        self._by_class = {"2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0}
        self.latency = Samples()

    def record(self, status: int, elapsed_ms: float) -> None:
        key = f"{min(max(status // 100, 2), 5)}xx"
        self._by_class[key] += 1
        self.latency.record(elapsed_ms)

    def counters(self) -> dict[str, int]:
        """Totals since start: ``requests_2xx`` ... ``requests_5xx``."""
        return {f"requests_{key}": count for key, count in self._by_class.items()}


class PublishTotals:
    """What a publisher counts since start, by the names its ``counters()``
    gives the metrics (``EventPublisher.counters``), and its events' lateness.
    Its own thread adds; other threads read (an int read is atomic)."""

    def __init__(self) -> None:
        self.published = 0
        self.confirmed = 0
        self.returned = 0
        self.nacked = 0
        self.dead_lettered = 0
        self.late_skipped = 0
        self.reconnects = 0  # to the broker (a publisher without one: always 0)
        self._lateness = Samples()  # publish time - due time, ms

    def counters(self) -> dict[str, int]:
        return {
            "published": self.published,
            "confirmed": self.confirmed,
            "returned": self.returned,
            "nacked": self.nacked,
            "dead_lettered": self.dead_lettered,
            "late_skipped": self.late_skipped,
            "broker_reconnects": self.reconnects,
        }

    def take_lateness(self) -> list[float]:
        """Publish time - due time (ms) of each event published since the last call."""
        return self._lateness.take()
