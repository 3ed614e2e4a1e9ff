"""Metrics: counters, the collector, the reporter's buffering, the renderings.

Pure logic with fakes: a fake engine (totals and gauges the test sets), the
FakeStore, and a fake sink that fails on demand.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

import pytest
from support.fakes import FakeClock, FakeStore

from triggerhook.domain.task import Task
from triggerhook.errors import MetricsRejected, MetricsUnavailable, StoreUnavailable
from triggerhook.interfaces import EngineStats
from triggerhook.metrics.collector import Collector
from triggerhook.metrics.reporter import MetricsReporter
from triggerhook.runtime import points
from triggerhook.runtime.counters import RequestStats, Samples, Tally, summary
from triggerhook.runtime.points import Point
from triggerhook.status import render as status_text

NOW = 1_700_000_000_000
TAGS = {"instance": "i1", "host": "h1"}


class FakeEngine:
    def __init__(self) -> None:
        self.totals: dict[str, int] = {
            "scheduled": 0,
            "fired": 0,
            "deleted": 0,
            "cancelled": 0,
            "returned": 0,
        }
        self.gauges = EngineStats(
            in_memory=7, shards=1, armed=2, send_buffer=3, unconfirmed=4, members=5, fired=0,
            deleted=0,
        )  # fmt: skip
        self.lateness: list[float] = []

    def counters(self) -> Mapping[str, int]:
        return dict(self.totals)

    def stats(self) -> EngineStats:
        return self.gauges

    def take_lateness(self) -> list[float]:
        taken, self.lateness = self.lateness, []
        return taken


def collector(engine: FakeEngine, store: FakeStore, recount_ms: int = 60_000) -> Collector:
    return Collector(engine, store, TAGS, recount_ms, NOW)


# -- counters -----------------------------------------------------------------------------


def test_tally_adds_from_many_threads_without_losing_counts() -> None:
    tally = Tally()

    def add() -> None:
        for _ in range(10_000):
            tally.add(1)

    threads = [threading.Thread(target=add) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert tally.value == 40_000


def test_samples_are_taken_once() -> None:
    samples = Samples()
    samples.record(1.0)
    samples.record(2.0)
    assert samples.take() == [1.0, 2.0]
    assert samples.take() == []


def test_summary_percentiles() -> None:
    assert summary([], "x") == {}
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert summary(values, "lateness") == {
        "lateness_p50_ms": 51.0,
        "lateness_p99_ms": 100.0,
        "lateness_max_ms": 100.0,
    }


def test_request_stats_by_status_class() -> None:
    stats = RequestStats()
    for status in (200, 201, 204, 404, 422, 503, 101):
        stats.record(status, 1.5)
    assert stats.counters() == {
        "requests_2xx": 4,  # 1xx counts as 2xx: the request was served
        "requests_3xx": 0,
        "requests_4xx": 2,
        "requests_5xx": 1,
    }
    assert stats.latency.take() == [1.5] * 7


# -- the collector ---------------------------------------------------------------------------


def test_collector_reports_period_differences_gauges_and_lateness() -> None:
    engine, store = FakeEngine(), FakeStore()
    store.put(Task("old", NOW - 5000, "rk"))
    store.put(Task("new", NOW + 5000, "rk"))
    col = collector(engine, store)
    engine.totals.update(scheduled=10, fired=4)
    engine.lateness = [1.0, 3.0, 2.0]

    (point,) = col.collect(NOW + 1000)

    assert point == Point(points.ENGINE, TAGS, point.fields, NOW + 1000)
    fields = point.fields
    assert fields["period_ms"] == 1000
    assert (fields["scheduled"], fields["fired"], fields["deleted"]) == (10, 4, 0)
    assert (fields["in_memory"], fields["heap"], fields["send_buffer"]) == (7, 2, 3)
    assert (fields["unconfirmed"], fields["shards"], fields["members"]) == (4, 1, 5)
    assert fields["oldest_overdue_ms"] == 6000  # "old" was due at NOW - 5000
    assert fields["tasks_db"] == 2
    assert (fields["lateness_p50_ms"], fields["lateness_max_ms"]) == (2.0, 3.0)

    engine.totals.update(scheduled=15)
    (second,) = col.collect(NOW + 3000)
    assert second.fields["scheduled"] == 5 and second.fields["fired"] == 0
    assert second.fields["period_ms"] == 2000
    assert "lateness_p50_ms" not in second.fields  # nothing published: absent, not 0
    assert col.latest == {points.ENGINE: dict(second.fields)}


def test_tasks_in_db_is_recounted_rarely_and_follows_own_changes_between() -> None:
    engine, store = FakeEngine(), FakeStore()
    for n in range(5):
        store.put(Task(f"t{n}", NOW + 10_000, "rk"))
    col = collector(engine, store, recount_ms=10_000)
    assert col.collect(NOW + 1000)[0].fields["tasks_db"] == 5
    store.put(Task("by-another-instance", NOW + 10_000, "rk"))  # seen at the next recount
    engine.totals.update(scheduled=3, deleted=1, cancelled=1)
    assert col.collect(NOW + 2000)[0].fields["tasks_db"] == 6  # 5 + 3 - 1 - 1
    assert col.collect(NOW + 11_000)[0].fields["tasks_db"] == 6  # recounted: 6 rows
    assert store.count_calls == 2


class SlowCountStore(FakeStore):
    """A store whose COUNT(*) takes ``count_s`` on ``clock`` (seconds)."""

    def __init__(self, clock: list[float], count_s: float) -> None:
        super().__init__()
        self._seconds, self.count_s = clock, count_s

    def count_tasks(self) -> int:
        self._seconds[0] += self.count_s
        return super().count_tasks()


def test_a_slow_recount_waits_a_hundred_times_its_duration() -> None:
    clock = [0.0]
    engine, store = FakeEngine(), SlowCountStore(clock, count_s=3.0)
    col = Collector(engine, store, TAGS, 10_000, NOW, clock_s=lambda: clock[0])
    col.collect(NOW + 1000)
    assert store.count_calls == 1
    col.collect(NOW + 1000 + 299_000)  # a 3 s count: the next one 300 s after it
    assert store.count_calls == 1
    store.count_s = 0.001  # quick again: back to every recount_ms
    col.collect(NOW + 1000 + 300_000)
    col.collect(NOW + 1000 + 309_000)
    assert store.count_calls == 2
    col.collect(NOW + 1000 + 310_000)
    assert store.count_calls == 3


def test_a_failed_recount_doubles_the_wait() -> None:
    engine, store = FakeEngine(), FakeStore()
    col = collector(engine, store, recount_ms=10_000)
    assert col.collect(NOW)[0].fields["tasks_db"] == 0
    store.fail_next("count_tasks", StoreUnavailable("max_statement_time exceeded"))
    (point,) = col.collect(NOW + 10_000)  # failed: no figure; the next try in 20 s
    assert "tasks_db" not in point.fields and col.probe_errors == 1
    col.collect(NOW + 29_000)
    assert store.count_calls == 1  # the failed call is not recorded
    store.fail_next("count_tasks", StoreUnavailable("max_statement_time exceeded"))
    col.collect(NOW + 30_000)  # failed again: the next try in 40 s
    col.collect(NOW + 69_000)
    assert store.count_calls == 1
    assert col.collect(NOW + 70_000)[0].fields["tasks_db"] == 0
    assert store.count_calls == 2


def test_database_figures_are_left_out_when_the_database_is_down() -> None:
    engine, store = FakeEngine(), FakeStore()
    col = collector(engine, store)
    store.fail_next("earliest_due_ms", StoreUnavailable("down"))
    (point,) = col.collect(NOW + 1000)
    assert "oldest_overdue_ms" not in point.fields and "tasks_db" not in point.fields
    assert point.fields["in_memory"] == 7
    assert col.probe_errors == 1
    assert col.collect(NOW + 2000)[0].fields["oldest_overdue_ms"] == 0  # empty table


def test_http_point_once_the_api_is_attached() -> None:
    engine, store = FakeEngine(), FakeStore()
    col = collector(engine, store)
    col.http = RequestStats()
    col.http.record(201, 2.0)
    col.http.record(422, 4.0)
    _engine_point, http_point = col.collect(NOW + 500)
    assert http_point.measurement == points.HTTP and http_point.tags == TAGS
    assert http_point.fields["requests_2xx"] == 1 and http_point.fields["requests_4xx"] == 1
    assert http_point.fields["latency_max_ms"] == 4.0
    assert col.collect(NOW + 1000)[1].fields["requests_2xx"] == 0


# -- the reporter ------------------------------------------------------------------------------


class FakeSink:
    def __init__(self) -> None:
        self.written: list[list[Point]] = []
        self.errors: list[Exception] = []
        self.closed = False

    def write(self, batch: Sequence[Point]) -> None:
        if self.errors:
            raise self.errors.pop(0)
        self.written.append(list(batch))

    def close(self) -> None:
        self.closed = True


def reporter(sink: FakeSink | None, buffer_points: int = 100) -> MetricsReporter:
    engine = FakeEngine()
    return MetricsReporter(
        FakeClock(NOW), collector(engine, FakeStore()), sink, 1000, buffer_points
    )


def test_points_kept_while_the_sink_is_down_then_written_together() -> None:
    sink = FakeSink()
    rep = reporter(sink)
    sink.errors = [MetricsUnavailable("down")]
    rep.step(NOW + 1000)
    assert sink.written == [] and rep.written == 0
    rep.step(NOW + 2000, final=True)  # final: writes even inside the back-off
    assert [len(batch) for batch in sink.written] == [2]
    assert [p.time_ms for p in sink.written[0]] == [NOW + 1000, NOW + 2000]
    assert rep.dropped == 0


def test_a_full_buffer_drops_the_oldest_and_reports_how_many(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = FakeSink()
    rep = reporter(sink, buffer_points=2)
    sink.errors = [MetricsUnavailable("down")] * 3
    with caplog.at_level(logging.WARNING):
        for n in range(1, 4):
            rep.step(NOW + n * 1000, final=True)
    assert rep.dropped == 1
    assert "dropped" in caplog.text
    rep.step(NOW + 4000, final=True)
    (batch,) = sink.written
    assert [p.time_ms for p in batch] == [NOW + 3000, NOW + 4000]
    assert batch[-1].fields["metrics_dropped"] == 1  # the drop is itself reported


def test_rejected_points_are_dropped_not_retried(caplog: pytest.LogCaptureFixture) -> None:
    sink = FakeSink()
    rep = reporter(sink)
    sink.errors = [MetricsRejected("database not found")]
    with caplog.at_level(logging.ERROR):
        rep.step(NOW + 1000, final=True)
    assert "database not found" in caplog.text
    rep.step(NOW + 2000, final=True)
    assert [[p.time_ms for p in batch] for batch in sink.written] == [[NOW + 2000]]
    assert sink.written[0][0].fields["metrics_dropped"] == 1


def test_a_collect_bug_is_logged_and_the_thread_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    sink = FakeSink()
    rep = reporter(sink)
    rep.collector.collect = lambda *_a: 1 / 0  # type: ignore[assignment, method-assign]
    with caplog.at_level(logging.ERROR):
        rep.step(NOW + 1000)
    assert rep.collect_errors == 1 and "collecting failed" in caplog.text


def test_the_thread_writes_every_period_and_flushes_and_closes_on_stop() -> None:
    sink = FakeSink()
    rep = MetricsReporter(FakeClock(NOW), collector(FakeEngine(), FakeStore()), sink, 100, 100)
    rep.start()
    deadline = threading.Event()
    for _ in range(100):
        if len(sink.written) >= 2:
            break
        deadline.wait(0.02)
    rep.stop()
    assert rep.join(5)
    assert len(sink.written) >= 3  # at least two periods, and the final flush
    assert sink.closed


def test_without_a_sink_figures_are_still_collected() -> None:
    rep = reporter(None)
    rep.step(NOW + 1000)
    assert rep.collector.latest[points.ENGINE]["in_memory"] == 7


# -- renderings --------------------------------------------------------------------------------


def test_status_text_names_the_figures_an_operator_needs() -> None:
    text = status_text(
        {
            "instance": "i1",
            "running": True,
            "period": {"period_ms": 1000, "fired": 12, "tasks_db": 40, "oldest_overdue_ms": 3,
                       "lateness_p50_ms": 0.0, "lateness_p99_ms": 2.0, "lateness_max_ms": 5.0},
            "http": {"requests_2xx": 9},
            "totals": {"fired": 100},
        }
    )  # fmt: skip
    assert "i1  (running)" in text
    assert "fired 12" in text and "tasks 40, oldest overdue 3 ms" in text
    assert "p50 0, p99 2, max 5 ms" in text
    assert "requests_2xx 9" in text and "latency (none in the period)" in text
    assert status_text({"instance": "x", "running": False}).count("no metrics period") == 1
