"""What the daemon and its client agree on about a task, stated once: the
daemon (``triggerhook``) takes these from here. Standard library only.
"""

from __future__ import annotations

import enum
import re

# A task id: also what a path segment of /v1/tasks/<id> may hold.
ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,64}")
ID_RULE = "must be 1-64 characters from [A-Za-z0-9._:-]"

# The range of due times, in epoch milliseconds (UTC).
MIN_DUE_MS = 0  # 1970-01-01T00:00:00Z
MAX_DUE_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
DUE_RULE = "must be between 1970-01-01 and 9999-12-31 (UTC)"


class TaskState(enum.Enum):
    """Where a stored task stands."""

    SCHEDULED = "scheduled"  # may still be cancelled
    FIRING = "firing"  # committed to publishing; cancel is too late
