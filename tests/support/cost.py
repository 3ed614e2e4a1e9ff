"""How the cost of parsing grows with the input: linear, never quadratic.

Timing on a noisy shared machine, so robustly: the process's CPU time, not
the wall clock's (other processes taking the CPU from it are not its cost:
on CI's two cores shared by three test workers, wall time once put a ratio
that is ~12 on a quiet machine at 30.4), the best of several runs, the two
sizes timed in turns (so that a busy spell of the machine falls on both
alike), each run with the garbage collector off (as ``timeit`` does: a
collection walks the whole heap of a long-lived test worker, which is not the
parser's cost), and only a ratio between two sizes ten times apart is judged
(about 10 when linear, about 100 when quadratic).
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Callable

# Ten times the input may cost up to this many times the time: far below the
# ~100 of quadratic work, with room for a busy machine.
MAX_RATIO = 30
# Timer resolution: the small input's time counts as at least this.
_FLOOR_S = 50e-6


def best_time_s(
    call: Callable[[], object], expected: tuple[type[BaseException], ...], repeats: int = 7
) -> float:
    """The fastest of ``repeats`` runs of ``call`` (raising one of ``expected`` is fine)."""
    best = math.inf
    for _ in range(repeats):
        best = min(best, _timed_s(call, expected))
    return best


def _timed_s(call: Callable[[], object], expected: tuple[type[BaseException], ...]) -> float:
    """The CPU time of the process (every thread: a call may hand work to
    another) over one run of ``call``, with the garbage collector off."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        started = time.process_time()
        with contextlib.suppress(*expected):
            call()
        return time.process_time() - started
    finally:
        if collecting:
            gc.enable()


def cost_ratio(
    parse: Callable[[object], object],
    make: Callable[[int], object],
    small_n: int,
    expected: tuple[type[BaseException], ...],
) -> float:
    """Time of ``parse(make(10 * small_n))`` over ``parse(make(small_n))``, best
    of 7 each, timed in turns."""
    small, large = make(small_n), make(10 * small_n)
    best_time_s(lambda: parse(small), expected, repeats=2)  # warm up
    small_s = large_s = math.inf
    for _ in range(7):
        large_s = min(large_s, _timed_s(lambda: parse(large), expected))
        small_s = min(small_s, _timed_s(lambda: parse(small), expected))
    return large_s / max(small_s, _FLOOR_S)
