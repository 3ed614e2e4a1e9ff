"""Clocks. The engine fires by :class:`DatabaseClock`: the database's time as
estimated here, so a host whose clock is wrong neither fires early nor
computes leases the other instances read differently. Tests pass ``now``
explicitly or use a fake with ``now_ms`` and ``bounded``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from triggerhook.domain.clocksync import Bounds, ClockEstimate, Sample
from triggerhook.errors import TransientError
from triggerhook.runtime.worker import Worker

log = logging.getLogger(__name__)


class SystemClock:
    """The host's clock (for a library user without a database clock)."""

    def now_ms(self) -> float:
        return time.time() * 1000.0

    def bounded(self) -> bool:
        return True


class DatabaseClock:
    """The database's time: the lower bound of an estimate from timed samples
    (:mod:`~triggerhook.domain.clocksync`), so nothing is fired before its
    time by the database's clock, whatever the host's clock says.

    ``read_us`` asks the database for its time (epoch µs). :meth:`sync` takes
    one sample (the :class:`ClockSync` thread calls it every interval);
    :meth:`now_ms` takes one itself only before the first. Thread-safe.
    """

    def __init__(
        self,
        read_us: Callable[[], int],
        max_uncertainty_ms: float,
        drift_ppm: float,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._read_us = read_us
        self._max_uncertainty_ms = max_uncertainty_ms
        self._monotonic_ns = monotonic_ns
        self._estimate = ClockEstimate(drift_ppm)
        self._lock = threading.Lock()

    def sync(self) -> None:
        """Take one sample; raises :class:`~triggerhook.errors.TransientError`
        (the estimate stays, widening by the drift) when the database is down."""
        before_ns = self._monotonic_ns()
        db_us = self._read_us()
        after_ns = self._monotonic_ns()
        with self._lock:
            self._estimate.add(Sample(before_ns, db_us, after_ns))

    def bounds(self) -> Bounds:
        with self._lock:
            found = self._estimate.bounds(self._monotonic_ns())
        if found is None:
            self.sync()
            return self.bounds()
        return found

    def now_ms(self) -> float:
        return self.bounds().lower_ms

    def uncertainty_ms(self) -> float:
        return self.bounds().uncertainty_ms

    def bounded(self) -> bool:
        """The estimate is within ``clock_uncertainty_max_ms``: fire by it."""
        return self.uncertainty_ms() <= self._max_uncertainty_ms

    def figures(self) -> dict[str, float]:
        """For the metrics: the uncertainty, and how far the host's clock is
        from the estimate's midpoint (positive: the host is ahead)."""
        found = self.bounds()
        midpoint_ms = (found.lower_ms + found.upper_ms) / 2
        return {
            "clock_uncertainty_ms": round(found.uncertainty_ms, 3),
            "clock_offset_ms": round(time.time() * 1000.0 - midpoint_ms, 3),
        }


class ClockSync(Worker):
    """Samples the database's clock every ``interval_ms``; on failure, backs
    off and logs (the estimate widens meanwhile; past the bound the scheduler
    holds and the daemon reports unready)."""

    def __init__(self, clock: DatabaseClock, interval_ms: int) -> None:
        # A failure here must not stop the engine: run() handles every error.
        super().__init__("th-clock", on_failure=lambda _name, _exc: None)
        self._clock = clock
        self._interval_s = interval_ms / 1000
        self._wakeup = threading.Event()

    def wake(self) -> None:
        self._wakeup.set()

    def figures(self) -> dict[str, float]:
        return self._clock.figures()

    def run(self) -> None:
        while not self.stopping:
            try:
                self._clock.sync()
            except TransientError as exc:
                self.back_off(exc, "reading the database's clock")
                continue
            self.succeeded("reading the database's clock")
            self.pause(self._wakeup, self._interval_s)  # beating: see Worker.stalled
