"""Rate-limited log lines: what hostile input could otherwise repeat at will."""

from __future__ import annotations

import logging

import pytest

from triggerhook.ratelimit import KeyedRateLimit, RateLimitedLog


def test_keyed_rate_limit_passes_one_per_key_per_interval_and_counts_the_rest() -> None:
    limit = KeyedRateLimit(interval_s=10.0, max_keys=2)
    assert limit.allow("a", 0.0) == 0
    assert limit.allow("a", 1.0) is None
    assert limit.allow("a", 2.0) is None
    assert limit.allow("b", 2.0) == 0  # another key has its own budget
    assert limit.allow("a", 10.0) == 2  # two held back since the last pass
    assert limit.allow("c", 11.0) == 0  # a third key evicts the least recent ("b")
    assert limit.allow("b", 11.5) == 0  # forgotten: passes as new
    assert limit.allow("c", 12.0) is None


def test_rate_limited_log_logs_once_per_interval_per_key_and_counts_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now_s = [100.0]
    logger = logging.getLogger("test.limiter")
    limited = RateLimitedLog(logger, interval_s=10.0, clock=lambda: now_s[0])
    caplog.set_level(logging.WARNING, logger="test.limiter")

    logged = [limited.warning("refused", "refused: %s", f"n={n}") for n in range(1000)]
    logged.append(limited.warning("other", "other: %d", 1))
    now_s[0] += 9.9
    logged.append(limited.warning("refused", "refused: %s", "still inside"))
    now_s[0] += 0.1
    logged.append(limited.warning("refused", "refused: %s", "next interval", extra={"k": "v"}))

    assert logged.count(True) == 3
    assert logged[0] is True and logged[-1] is True
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "refused: n=0",
        "other: 1",
        "refused: next interval (1000 more since the last line)",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records)
    assert caplog.records[-1].k == "v"  # type: ignore[attr-defined]
