"""The one retry policy of the project (the daemon's threads and this
client's calls): capped exponential back-off with equal jitter.

The n-th delay (n from 0) has the ceiling ``min(max, initial * 2**n)``
(:func:`capped_exponential`); :class:`Backoff` waits a random time between
half the ceiling and the ceiling ("equal jitter"): never less than half, so a
retry never comes at once, and spread enough that several instances do not
retry in lockstep. Standard library only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# 2**62 times any sensible initial delay is past any cap; beyond that a float
# would overflow (after ~1,000 attempts), so the exponent stops growing there.
_MAX_DOUBLINGS = 62


def capped_exponential(attempt: int, initial: float, cap: float) -> float:
    """``min(cap, initial * 2**attempt)`` for ``attempt`` >= 0 (an int when
    both bounds are ints)."""
    return min(cap, initial * (1 << min(max(attempt, 0), _MAX_DOUBLINGS)))


@dataclass(slots=True)
class Backoff:
    initial_s: float = 0.05
    max_s: float = 5.0
    attempt: int = 0
    _rng: random.Random = field(default_factory=random.Random, repr=False)

    def next_delay_s(self) -> float:
        """Delay before the next attempt; grows with each call until reset()."""
        ceiling = capped_exponential(self.attempt, self.initial_s, self.max_s)
        self.attempt += 1
        # Equal jitter: half the ceiling for sure, the other half at random.
        return float(ceiling / 2 + self._rng.random() * ceiling / 2)

    def reset(self) -> None:
        self.attempt = 0
