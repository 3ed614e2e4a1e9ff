"""How the cost of parsing grows with the input: linear, never quadratic.

Timing on a noisy shared machine, so robustly: the best of several runs,
and only a ratio between two sizes ten times apart is judged (about 10 when
linear, about 100 when quadratic).
"""

from __future__ import annotations

import contextlib
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
        started = time.perf_counter()
        with contextlib.suppress(*expected):
            call()
        best = min(best, time.perf_counter() - started)
    return best


def cost_ratio(
    parse: Callable[[object], object],
    make: Callable[[int], object],
    small_n: int,
    expected: tuple[type[BaseException], ...],
) -> float:
    """Time of ``parse(make(10 * small_n))`` over ``parse(make(small_n))``, best of 7 each."""
    small, large = make(small_n), make(10 * small_n)
    best_time_s(lambda: parse(small), expected, repeats=2)  # warm up
    large_s = best_time_s(lambda: parse(large), expected)
    return large_s / max(best_time_s(lambda: parse(small), expected), _FLOOR_S)
