"""The one retry policy: capped exponential back-off with full jitter.

Threads use :class:`Backoff` between attempts and wait on their stop event for
the returned delay, so a stop request interrupts the wait.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class Backoff:
    initial_s: float = 0.05
    max_s: float = 5.0
    attempt: int = 0
    _rng: random.Random = field(default_factory=random.Random, repr=False)

    def next_delay_s(self) -> float:
        """Delay before the next attempt; grows with each call until reset()."""
        ceiling = min(self.max_s, self.initial_s * (2**self.attempt))
        self.attempt += 1
        # Full jitter keeps several instances from retrying in lockstep.
        return float(ceiling / 2 + self._rng.random() * ceiling / 2)

    def reset(self) -> None:
        self.attempt = 0
