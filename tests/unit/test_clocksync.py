"""The database clock's estimate (domain/clocksync.py), the clock built on it
(clock.DatabaseClock) and the scheduler's hold while it is not bounded."""

from __future__ import annotations

import pytest
from support.fakes import FakeClock

from triggerhook.clock import DatabaseClock
from triggerhook.domain.arming import BOTTOM, ShardMarks
from triggerhook.domain.clocksync import ClockEstimate, Sample
from triggerhook.domain.task import Task
from triggerhook.engine.inventory import Inventory
from triggerhook.engine.scheduler import Scheduler
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.engine.shards import ShardTable
from triggerhook.errors import StoreUnavailable
from triggerhook.interfaces import Acquired, Lease

DB_US = 1_800_000_000_000_000  # the database's time at the first read
MS = 1_000_000  # ns


def test_no_sample_no_bounds() -> None:
    assert ClockEstimate(drift_ppm=0).bounds(0) is None


def test_one_sample_bounds_the_time_by_its_round_trip() -> None:
    estimate = ClockEstimate(drift_ppm=0)
    estimate.add(Sample(before_ns=10 * MS, db_us=DB_US, after_ns=14 * MS))  # 4 ms round trip
    bounds = estimate.bounds(14 * MS)
    assert bounds is not None
    # The read happened somewhere in the 4 ms: now is 0 to 4 ms after it.
    assert bounds.lower_ms == DB_US / 1000
    assert bounds.upper_ms == pytest.approx(DB_US / 1000 + 4 + 0.001)
    later = estimate.bounds(1014 * MS)
    assert later is not None
    assert later.lower_ms == pytest.approx(DB_US / 1000 + 1000)
    assert later.uncertainty_ms == pytest.approx(bounds.uncertainty_ms)


def test_a_quicker_read_tightens_the_bounds_for_good() -> None:
    estimate = ClockEstimate(drift_ppm=0)
    estimate.add(Sample(0, DB_US, 10 * MS))  # 10 ms round trip
    # The truth: the database's time is DB_US + the monotonic time (the first
    # read happened at 0, the second 0.5 ms into its 1 ms round trip).
    estimate.add(Sample(1000 * MS, DB_US + 1_000_500, 1001 * MS))
    bounds = estimate.bounds(2000 * MS)
    assert bounds is not None
    # The second read alone: [1999.5, 2000.5]; the first caps it at 2000.
    assert bounds.lower_ms == pytest.approx(DB_US / 1000 + 1999.5)
    assert bounds.upper_ms == pytest.approx(DB_US / 1000 + 2000, abs=0.002)
    assert bounds.lower_ms <= DB_US / 1000 + 2000 <= bounds.upper_ms  # the truth inside


def test_drift_widens_the_bounds_with_the_age_of_the_reads() -> None:
    estimate = ClockEstimate(drift_ppm=500)
    estimate.add(Sample(0, DB_US, 0))
    bounds = estimate.bounds(10_000 * MS)  # 10 s later: +-5 ms
    assert bounds is not None
    assert bounds.lower_ms == pytest.approx(DB_US / 1000 + 10_000 - 5)
    assert bounds.upper_ms == pytest.approx(DB_US / 1000 + 10_000 + 5, abs=0.002)


def test_a_stepped_database_clock_starts_the_estimate_again() -> None:
    estimate = ClockEstimate(drift_ppm=0)
    estimate.add(Sample(0, DB_US, 1 * MS))
    estimate.add(Sample(1000 * MS, DB_US + 60_000_000, 1001 * MS))  # a minute ahead: stepped
    assert len(estimate) == 1
    bounds = estimate.bounds(1001 * MS)
    assert bounds is not None
    assert bounds.lower_ms == pytest.approx(DB_US / 1000 + 60_000)


class FakeDatabase:
    """The database's clock, 20 s behind the host's, read over a 2 ms round trip."""

    def __init__(self) -> None:
        self.mono_ns = 5_000 * MS
        self.down = False
        self.reads = 0

    def monotonic_ns(self) -> int:
        return self.mono_ns

    def read_us(self) -> int:
        if self.down:
            raise StoreUnavailable("database unavailable")
        self.reads += 1
        self.mono_ns += 1 * MS  # the query reaches the server...
        value = DB_US + (self.mono_ns // 1000)
        self.mono_ns += 1 * MS  # ...and the answer comes back
        return value


def test_the_database_clock_is_the_lower_bound_and_reads_once_by_itself() -> None:
    db = FakeDatabase()
    clock = DatabaseClock(
        db.read_us, max_uncertainty_ms=50, drift_ppm=0, monotonic_ns=db.monotonic_ns
    )
    now = clock.now_ms()  # reads the database once: there is no estimate yet
    assert db.reads == 1
    truth_ms = (DB_US + db.mono_ns // 1000) / 1000
    assert truth_ms - 2 <= now <= truth_ms  # never ahead of the database's time
    assert clock.now_ms() == now and db.reads == 1  # no time passed, no new read
    assert clock.bounded()
    assert clock.uncertainty_ms() == pytest.approx(1.0, abs=0.002)


def test_the_database_clock_is_unbounded_once_drift_outgrows_the_limit() -> None:
    db = FakeDatabase()
    clock = DatabaseClock(
        db.read_us, max_uncertainty_ms=5, drift_ppm=500, monotonic_ns=db.monotonic_ns
    )
    clock.sync()
    db.down = True
    db.mono_ns += 5_000 * MS  # 5 s without a read: 1 ms + 2.5 ms
    assert clock.bounded()
    db.mono_ns += 5_000 * MS  # 10 s: 1 ms + 5 ms
    assert not clock.bounded()
    with pytest.raises(StoreUnavailable):
        clock.sync()  # the failure is the caller's to retry; the estimate stays
    assert clock.now_ms() > 0
    db.down = False
    clock.sync()
    assert clock.bounded()


class UnboundedClock(FakeClock):
    def __init__(self, now_ms: float) -> None:
        super().__init__(now_ms)
        self.ok = False

    def bounded(self) -> bool:
        return self.ok


def test_the_scheduler_fires_nothing_while_the_clock_is_unbounded() -> None:
    clock = UnboundedClock(1000.0)
    shards = ShardTable(clock, 0)
    shards.add([Acquired(Lease(0, 1), ShardMarks(BOTTOM, 1))], 10**9)
    scheduler = Scheduler(clock, SendBuffer(10), shards, Inventory(10), 10, lambda _n, _e: None)
    scheduler.push_many([Task("due", 900, "rk", shard=0, epoch=1)])
    batch, wait_s = scheduler.poll(clock.now_ms())
    assert batch == [] and wait_s is not None and wait_s > 0
    assert scheduler.holding
    clock.ok = True
    batch, _ = scheduler.poll(clock.now_ms())
    assert [task.id for task in batch] == ["due"]
    assert not scheduler.holding
