"""The real clock. Tests pass ``now`` explicitly or use a fake with ``now_ms``."""

from __future__ import annotations

import time


class SystemClock:
    def now_ms(self) -> float:
        return time.time() * 1000.0
