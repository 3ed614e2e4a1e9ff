"""The dedup window's sweep (engine/sweep.py): a round at most every
interval, over the shards held at that moment, in batches until one comes
back short, a long round continued at the next step, a failure leaving the
round due."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from support.fakes import FakeClock

from triggerhook.engine.sweep import FiredSweep
from triggerhook.errors import StoreUnavailable

INTERVAL_MS = 60_000
T0 = 1_800_000_000_000


class Records:
    """The store's side: expired records per shard; each call deletes up to
    ``limit`` of the shards given and is recorded."""

    def __init__(self, expired: dict[int, int]) -> None:
        self.expired = dict(expired)
        self.calls: list[tuple[tuple[int, ...], float, int]] = []
        self.fail_next = False

    def sweep_fired(self, shards: Sequence[int], now_ms: float, limit: int) -> int:
        self.calls.append((tuple(shards), now_ms, limit))
        if self.fail_next:
            self.fail_next = False
            raise StoreUnavailable("down")
        deleted = 0
        for shard in sorted(shards):
            take = min(limit - deleted, self.expired.get(shard, 0))
            self.expired[shard] = self.expired.get(shard, 0) - take
            deleted += take
        return deleted


def sweep_of(records: Records, clock: FakeClock, shards: list[int], **kw: int) -> FiredSweep:
    return FiredSweep(records, lambda: shards, clock, INTERVAL_MS, **kw)  # type: ignore[arg-type]


def test_the_first_round_comes_one_interval_after_the_first_step() -> None:
    records, clock = Records({0: 5}), FakeClock(T0)
    sweep = sweep_of(records, clock, [0])
    assert sweep.step() == 0
    clock.advance(INTERVAL_MS - 1)
    assert sweep.step() == 0
    assert records.calls == []
    clock.advance(1)
    assert sweep.step() == 5
    assert records.calls == [((0,), T0 + INTERVAL_MS, 1000)]
    # The next round one interval on, not before.
    clock.advance(INTERVAL_MS - 1)
    assert sweep.step() == 0 and len(records.calls) == 1
    clock.advance(1)
    assert sweep.step() == 0 and len(records.calls) == 2
    assert sweep.swept == 5


def test_a_round_takes_batches_until_one_is_short() -> None:
    records, clock = Records({3: 25, 7: 4}), FakeClock(T0)
    sweep = sweep_of(records, clock, [3, 7], batch=10)
    sweep.step()
    clock.advance(INTERVAL_MS)
    assert sweep.step() == 29
    assert [call[2] for call in records.calls] == [10, 10, 10]  # 10, 10, 9: short
    assert records.expired == {3: 0, 7: 0}


def test_a_long_round_goes_on_at_the_next_step() -> None:
    records, clock = Records({1: 100}), FakeClock(T0)
    sweep = sweep_of(records, clock, [1], batch=10, max_batches=3)
    sweep.step()
    clock.advance(INTERVAL_MS)
    assert sweep.step() == 30  # three full batches: the thread goes back to its work
    assert sweep.step() == 30  # still due: on at once
    assert sweep.step() == 30
    assert sweep.step() == 10  # short at last (the fourth batch finds none)
    assert sweep.step() == 0  # the next round an interval on
    assert sweep.swept == 100


def test_no_shards_held_sweeps_nothing() -> None:
    records, clock = Records({0: 5}), FakeClock(T0)
    sweep = sweep_of(records, clock, [])
    sweep.step()
    clock.advance(INTERVAL_MS)
    assert sweep.step() == 0
    assert records.calls == []


def test_a_failure_leaves_the_round_due() -> None:
    records, clock = Records({0: 5}), FakeClock(T0)
    sweep = sweep_of(records, clock, [0])
    sweep.step()
    clock.advance(INTERVAL_MS)
    records.fail_next = True
    with pytest.raises(StoreUnavailable):
        sweep.step()
    assert sweep.step() == 5  # retried at the next step, not an interval later
