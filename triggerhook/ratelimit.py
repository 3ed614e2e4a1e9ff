"""Rate limits for log lines that hostile or broken input could repeat at will."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping


class KeyedRateLimit:
    """At most one pass per key per ``interval_s``; counts what it held back.

    Bounded: past ``max_keys`` the least recently passed key is forgotten, so a
    flood of distinct keys (routing keys, users) cannot grow memory. Thread-safe.
    """

    def __init__(self, interval_s: float, max_keys: int = 1024) -> None:
        self._interval_s = interval_s
        self._max_keys = max_keys
        self._keys: OrderedDict[str, tuple[float, int]] = OrderedDict()  # key -> (last, held)
        self._lock = threading.Lock()

    def allow(self, key: str, now_s: float) -> int | None:
        """None: hold this one back. Otherwise pass it; the number returned is
        how many were held back for ``key`` since it last passed."""
        with self._lock:
            entry = self._keys.get(key)
            if entry is not None and now_s - entry[0] < self._interval_s:
                self._keys[key] = (entry[0], entry[1] + 1)
                return None
            self._keys[key] = (now_s, 0)
            self._keys.move_to_end(key)
            if len(self._keys) > self._max_keys:
                self._keys.popitem(last=False)
            return 0 if entry is None else entry[1]


class RateLimitedLog:
    """WARNING lines, at most one per key per ``interval_s``; a line that
    follows held-back ones says how many. Thread-safe."""

    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float,
        max_keys: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._limit = KeyedRateLimit(interval_s, max_keys)
        self._clock = clock

    def warning(
        self, key: str, message: str, *args: object, extra: Mapping[str, object] | None = None
    ) -> bool:
        """Log ``message % args`` unless ``key`` was logged less than the
        interval ago; True when logged."""
        held = self._limit.allow(key, self._clock())
        if held is None:
            return False
        more = f" ({held} more since the last line)" if held else ""
        self._logger.warning(message + "%s", *args, more, extra=extra)
        return True
