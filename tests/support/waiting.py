"""Waiting on conditions with a deadline (never sleep-and-hope), and the clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def now_ms() -> int:
    """Wall-clock epoch milliseconds (the clock the engine and the consumer use)."""
    return int(time.time() * 1000)


def wait_until(predicate: Callable[[], object], timeout_s: float, interval_s: float = 0.02) -> bool:
    """Poll ``predicate`` until it is truthy (True) or ``timeout_s`` passed (False)."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while True:
        if predicate():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        pause.wait(min(interval_s, left))


def wait_for(
    predicate: Callable[[], object],
    timeout_s: float,
    message: str | Callable[[], str] = "condition not met",
    interval_s: float = 0.05,
) -> None:
    """Like :func:`wait_until`, but an AssertionError with ``message`` on timeout."""
    if not wait_until(predicate, timeout_s, interval_s):
        text = message() if callable(message) else message
        raise AssertionError(f"timed out after {timeout_s:.1f}s: {text}")
