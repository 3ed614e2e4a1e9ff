"""Where the database's clock stands, from timed samples of it (pure: no I/O).

A sample is a read of the database's time ``db_us`` (epoch microseconds)
that happened somewhere between two readings of the local monotonic clock,
``before_ns`` and ``after_ns``. At a later monotonic time ``m`` the database's
clock therefore reads at least ``db_us + (m - after_ns)`` and at most
``db_us + 1 + (m - before_ns)`` (in µs), each widened by the two clocks'
relative drift (``drift_ppm``) over the time since the sample. Several
samples bound it together: the highest lower bound and the lowest upper bound
(one quick round trip tightens the estimate for good).

Samples that contradict each other (no time lies within all their bounds:
the database's clock was stepped) are dropped, all but the newest.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

_NS_PER_US = 1000


@dataclass(frozen=True, slots=True)
class Sample:
    before_ns: int  # monotonic, just before the query
    db_us: int  # the database's time, epoch microseconds
    after_ns: int  # monotonic, just after the answer


@dataclass(frozen=True, slots=True)
class Bounds:
    """The database's time at one monotonic instant, in epoch milliseconds."""

    lower_ms: float
    upper_ms: float

    @property
    def uncertainty_ms(self) -> float:
        """Half the width: the most the midpoint can be wrong by."""
        return (self.upper_ms - self.lower_ms) / 2


class ClockEstimate:
    """The bounds that the last ``keep`` samples give. Not thread-safe.

    Every sample's bound grows at the same rate (1 ∓ drift), so the highest
    lower bound and the lowest upper bound belong to the same samples at every
    later instant: their intercepts are kept, and :meth:`bounds` is O(1).
    """

    def __init__(self, drift_ppm: float, keep: int = 8) -> None:
        self._slow = (1 - drift_ppm / 1e6) / _NS_PER_US  # µs of the lower bound per ns
        self._fast = (1 + drift_ppm / 1e6) / _NS_PER_US  # µs of the upper bound per ns
        self._samples: deque[Sample] = deque(maxlen=max(1, keep))
        self._lower_at_0 = 0.0  # µs: the lower bound is _lower_at_0 + mono_ns * _slow
        self._upper_at_0 = 0.0

    def __len__(self) -> int:
        return len(self._samples)

    def add(self, sample: Sample) -> None:
        self._samples.append(sample)
        self._combine()
        latest = sample.after_ns
        if self._lower_at_0 + latest * self._slow > self._upper_at_0 + latest * self._fast:
            # No time lies within every sample's bounds: the clock was stepped.
            self._samples.clear()
            self._samples.append(sample)
            self._combine()

    def bounds(self, mono_ns: int) -> Bounds | None:
        """The database's time at ``mono_ns`` (not before the newest sample's
        ``after_ns``), or None before the first sample."""
        if not self._samples:
            return None
        lower_us = self._lower_at_0 + mono_ns * self._slow
        upper_us = self._upper_at_0 + mono_ns * self._fast
        return Bounds(lower_us / 1000, upper_us / 1000)

    def _combine(self) -> None:
        self._lower_at_0 = max(s.db_us - s.after_ns * self._slow for s in self._samples)
        self._upper_at_0 = min(s.db_us + 1 - s.before_ns * self._fast for s in self._samples)
