"""What the daemon and its client agree on about a task, stated once: the
daemon (``triggerhook``) takes these from here. Standard library only.
"""

from __future__ import annotations

import enum
import re

# A task id: also what a path segment of /v1/tasks/<id> may hold.
ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,64}")
ID_RULE = "must be 1-64 characters from [A-Za-z0-9._:-]"
# Never task ids: /v1/tasks/<these> are other endpoints of the API (the daemon
# refuses to create tasks with these ids; the client never asks for them).
RESERVED_IDS = frozenset({"batch", "count", "timeline", "cancel"})

# The range of due times, in epoch milliseconds (UTC).
MIN_DUE_MS = 0  # 1970-01-01T00:00:00Z
MAX_DUE_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
DUE_RULE = "must be between 1970-01-01 and 9999-12-31 (UTC)"


class TaskState(enum.Enum):
    """Where a stored task stands."""

    SCHEDULED = "scheduled"  # may still be cancelled
    FIRING = "firing"  # committed to publishing; cancel is too late


# The filters of a listing, count, timeline and bulk cancel (a task matches
# when every one given does), by their names in the API, the client and the
# CLI (as flags, --routing-key): the id's prefix, the routing key and a tag,
# of which a bulk cancel names at least one; the due range, each bound given
# as an instant (due_after, inclusive; due_before, exclusive) or in epoch ms
# (the name with _ms: due_after_ms), at most one of the two; and the state.
SELECTION_FIELDS = ("prefix", "routing_key", "tag")
DUE_RANGE_FIELDS = ("due_after", "due_before")
STATE_FIELD = "state"
FILTER_FIELDS = (*SELECTION_FIELDS, *DUE_RANGE_FIELDS, STATE_FIELD)


def in_ms(name: str) -> str:
    """The name of the field that gives instant ``name`` in epoch ms."""
    return f"{name}_ms"
