"""The engine's figures for one period, as metrics points.

The collector runs on the metrics thread. It reads totals the engine's
threads keep (no locks on their side), takes differences from the previous
period, reads the size gauges, and asks the database two cheap questions: the
earliest due time (the first entry of an index) every period, and an exact
``COUNT(*)`` only every ``metrics_recount_s`` — less often when a count is
slow (a large table under heavy writes): the recounts take at most a
hundredth of the time, and one the server stopped doubles the wait.

It also counts each period's lateness and request latencies into histograms
of everything since start (:attr:`Collector.histograms`, for ``/metrics``):
Prometheus aggregates buckets over time and instances, which the per-period
percentiles cannot be.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from triggerhook.errors import TriggerHookError
from triggerhook.interfaces import EngineStats, TaskStore
from triggerhook.runtime import points
from triggerhook.runtime.counters import Histogram, HistogramSnapshot, RequestStats, summary
from triggerhook.runtime.points import Field, Point

log = logging.getLogger(__name__)

# The histograms' names (keys of Collector.histograms) and bucket bounds, in ms:
# fire lateness 1 ms to 10 s; HTTP request handling 0.5 ms to 5 s.
LATENESS = "lateness"
HTTP_LATENCY = "http_latency"
LATENESS_BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
HTTP_LATENCY_BOUNDS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
# A recount waits at least its own duration divided by this: a 3 s count
# (1,000,000 rows while they were being written, here) comes every 300 s.
RECOUNT_COST_SHARE = 0.01
# The longest wait between recounts after failed ones (each failure doubles it).
MAX_RECOUNT_GAP_MS = 3_600_000


class EngineFigures(Protocol):
    """What the collector reads of the engine (:class:`~triggerhook.engine.engine.Engine`)."""

    def counters(self) -> Mapping[str, int]: ...

    def stats(self) -> EngineStats: ...

    def take_lateness(self) -> list[float]: ...


class Collector:
    """Not thread-safe: the metrics thread's own object."""

    def __init__(
        self,
        engine: EngineFigures,
        store: TaskStore,
        tags: Mapping[str, str],
        recount_ms: int,
        now_ms: int,
        extra_gauges: Callable[[], Mapping[str, Field]] | None = None,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._extra_gauges = extra_gauges  # e.g. the database clock's figures
        self._store = store
        self._tags = dict(tags)
        self._recount_ms = recount_ms
        self._recount_gap_ms = recount_ms  # grows when counts are slow or fail
        self._next_count_ms = now_ms  # at the first period
        self._clock_s = clock_s  # times the recount
        self.http: RequestStats | None = None  # set when the HTTP API runs
        self._last_ms = now_ms
        self._last = engine.counters()
        self._last_http: dict[str, int] = {}
        self._counted: tuple[int, int, dict[str, int]] | None = None  # (at_ms, count, totals)
        self.probe_errors = 0
        self.latest: dict[str, dict[str, Field]] = {}  # measurement -> last fields
        self._lateness = Histogram(LATENESS_BOUNDS_MS)
        self._http_latency = Histogram(HTTP_LATENCY_BOUNDS_MS)
        # name -> counts since start, as of the last period (replaced whole:
        # readers on other threads see one period's or the next's)
        self.histograms: dict[str, HistogramSnapshot] = {}

    def collect(self, now_ms: int, dropped: int = 0) -> list[Point]:
        """The points of the period that ends at ``now_ms``."""
        period_ms = max(1, now_ms - self._last_ms)
        totals = self._engine.counters()
        fields: dict[str, Field] = {"period_ms": period_ms, "metrics_dropped": dropped}
        fields.update(_differences(totals, self._last))
        fields.update(self._gauges())
        fields.update(self._database(now_ms, totals))
        lateness = self._engine.take_lateness()
        fields.update(summary(lateness, "lateness"))
        self._lateness.observe_all(lateness)
        self._last, self._last_ms = totals, now_ms
        out = [Point(points.ENGINE, self._tags, fields, now_ms)]
        histograms = {LATENESS: self._lateness.snapshot()}
        if self.http is not None:
            out.append(Point(points.HTTP, self._tags, self._http_fields(period_ms), now_ms))
            histograms[HTTP_LATENCY] = self._http_latency.snapshot()
        self.latest = {point.measurement: dict(point.fields) for point in out}
        self.histograms = histograms
        return out

    def _gauges(self) -> dict[str, Field]:
        stats = self._engine.stats()
        gauges: dict[str, Field] = {
            "in_memory": stats.in_memory,
            "shards": stats.shards,
            "members": stats.members,
            "heap": stats.armed,
            "send_buffer": stats.send_buffer,
            "unconfirmed": stats.unconfirmed,
            **stats.throttle_holding,
        }
        if self._extra_gauges is not None:
            gauges.update(self._extra_gauges())
        return gauges

    def _database(self, now_ms: int, totals: Mapping[str, int]) -> dict[str, Field]:
        fields: dict[str, Field] = {}
        try:
            earliest = self._store.earliest_due_ms()
            fields["oldest_overdue_ms"] = 0 if earliest is None else max(0, now_ms - earliest)
            first_ms, waiting = self._store.outbox_waiting()
            fields["outbox_waiting"] = waiting
            fields["outbox_lag_ms"] = 0 if first_ms is None else max(0, now_ms - first_ms)
            tasks = self._tasks_in_db(now_ms, totals)
            if tasks is not None:
                fields["tasks_db"] = tasks
        except TriggerHookError as exc:
            # A database outage shows in the engine's own db_errors; these
            # figures are just missing from the period.
            self.probe_errors += 1
            log.warning("metrics: database figures unavailable: %s", exc)
        return fields

    def _tasks_in_db(self, now_ms: int, totals: Mapping[str, int]) -> int | None:
        if now_ms >= self._next_count_ms:
            self._recount(now_ms, totals)
        if self._counted is None:  # not counted yet (the first count failed)
            return None
        _at_ms, count, then = self._counted
        since = _differences(totals, then)
        # Other instances' changes show at the next recount.
        return max(0, count + since["scheduled"] - since["deleted"] - since["cancelled"])

    def _recount(self, now_ms: int, totals: Mapping[str, int]) -> None:
        started_s = self._clock_s()
        try:
            count = self._store.count_tasks()
        except TriggerHookError:
            self._recount_gap_ms = min(2 * self._recount_gap_ms, MAX_RECOUNT_GAP_MS)
            self._next_count_ms = now_ms + self._recount_gap_ms
            raise
        took_ms = (self._clock_s() - started_s) * 1000
        self._recount_gap_ms = max(self._recount_ms, round(took_ms / RECOUNT_COST_SHARE))
        self._next_count_ms = now_ms + self._recount_gap_ms
        self._counted = (now_ms, count, dict(totals))

    def _http_fields(self, period_ms: int) -> dict[str, Field]:
        assert self.http is not None
        totals = self.http.counters()
        fields: dict[str, Field] = {"period_ms": period_ms}
        fields.update(_differences(totals, self._last_http))
        self._last_http = totals
        latencies = self.http.latency.take()
        fields.update(summary(latencies, "latency"))
        self._http_latency.observe_all(latencies)
        return fields


def _differences(totals: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    return {name: value - before.get(name, 0) for name, value in totals.items()}
