"""The engine's figures for one period, as metrics points.

The collector runs on the metrics thread. It reads totals the engine's
threads keep (no locks on their side), takes differences from the previous
period, reads the size gauges, and asks the database two cheap questions: the
earliest due time (the first entry of an index) every period, and an exact
``COUNT(*)`` only every ``metrics_recount_s``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from triggerhook.errors import TriggerHookError
from triggerhook.interfaces import EngineStats, TaskStore
from triggerhook.runtime import points
from triggerhook.runtime.counters import RequestStats, summary
from triggerhook.runtime.points import Field, Point

log = logging.getLogger(__name__)


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
    ) -> None:
        self._engine = engine
        self._extra_gauges = extra_gauges  # e.g. the database clock's figures
        self._store = store
        self._tags = dict(tags)
        self._recount_ms = recount_ms
        self.http: RequestStats | None = None  # set when the HTTP API runs
        self._last_ms = now_ms
        self._last = engine.counters()
        self._last_http: dict[str, int] = {}
        self._counted: tuple[int, int, dict[str, int]] | None = None  # (at_ms, count, totals)
        self.probe_errors = 0
        self.latest: dict[str, dict[str, Field]] = {}  # measurement -> last fields

    def collect(self, now_ms: int, dropped: int = 0) -> list[Point]:
        """The points of the period that ends at ``now_ms``."""
        period_ms = max(1, now_ms - self._last_ms)
        totals = self._engine.counters()
        fields: dict[str, Field] = {"period_ms": period_ms, "metrics_dropped": dropped}
        fields.update(_differences(totals, self._last))
        fields.update(self._gauges())
        fields.update(self._database(now_ms, totals))
        fields.update(summary(self._engine.take_lateness(), "lateness"))
        self._last, self._last_ms = totals, now_ms
        out = [Point(points.ENGINE, self._tags, fields, now_ms)]
        if self.http is not None:
            out.append(Point(points.HTTP, self._tags, self._http_fields(period_ms), now_ms))
        self.latest = {point.measurement: dict(point.fields) for point in out}
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
        }
        if self._extra_gauges is not None:
            gauges.update(self._extra_gauges())
        return gauges

    def _database(self, now_ms: int, totals: Mapping[str, int]) -> dict[str, Field]:
        fields: dict[str, Field] = {}
        try:
            earliest = self._store.earliest_due_ms()
            fields["oldest_overdue_ms"] = 0 if earliest is None else max(0, now_ms - earliest)
            fields["tasks_db"] = self._tasks_in_db(now_ms, totals)
        except TriggerHookError as exc:
            # A database outage shows in the engine's own db_errors; these
            # figures are just missing from the period.
            self.probe_errors += 1
            log.warning("metrics: database figures unavailable: %s", exc)
        return fields

    def _tasks_in_db(self, now_ms: int, totals: Mapping[str, int]) -> int:
        if self._counted is None or now_ms - self._counted[0] >= self._recount_ms:
            self._counted = (now_ms, self._store.count_tasks(), dict(totals))
        _at_ms, count, then = self._counted
        since = _differences(totals, then)
        # Other instances' changes show at the next recount.
        return max(0, count + since["scheduled"] - since["deleted"] - since["cancelled"])

    def _http_fields(self, period_ms: int) -> dict[str, Field]:
        assert self.http is not None
        totals = self.http.counters()
        fields: dict[str, Field] = {"period_ms": period_ms}
        fields.update(_differences(totals, self._last_http))
        self._last_http = totals
        fields.update(summary(self.http.latency.take(), "latency"))
        return fields


def _differences(totals: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    return {name: value - before.get(name, 0) for name, value in totals.items()}
