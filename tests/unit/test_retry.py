"""The one retry policy: capped exponential back-off with equal jitter."""

from __future__ import annotations

import random

from triggerhook.retry import Backoff, capped_exponential


def test_capped_exponential_doubles_up_to_the_cap() -> None:
    assert [capped_exponential(n, 100, 1000) for n in range(6)] == [100, 200, 400, 800, 1000, 1000]
    assert capped_exponential(-1, 100, 1000) == 100
    assert isinstance(capped_exponential(3, 100, 10**6), int)


def test_capped_exponential_never_overflows() -> None:
    assert capped_exponential(100_000, 0.05, 5.0) == 5.0


def test_equal_jitter_waits_between_half_the_ceiling_and_the_ceiling() -> None:
    backoff = Backoff(initial_s=0.1, max_s=1.0, _rng=random.Random(1))
    for attempt in range(12):
        ceiling = min(1.0, 0.1 * 2**attempt)
        delay = backoff.next_delay_s()
        assert ceiling / 2 <= delay <= ceiling, (attempt, delay)
    assert backoff.attempt == 12
    backoff.reset()
    assert backoff.attempt == 0
    assert 0.05 <= backoff.next_delay_s() <= 0.1


def test_a_long_outage_keeps_backing_off_at_the_cap() -> None:
    # 0.05 * 2**1100 does not fit a float: the exponent stops growing instead.
    backoff = Backoff(attempt=1100)
    assert 2.5 <= backoff.next_delay_s() <= 5.0
