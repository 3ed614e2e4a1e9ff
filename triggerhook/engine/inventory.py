"""What this instance holds in memory: task ids and row revisions, bounded."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from triggerhook.interfaces import Claim


class Inventory:
    """Thread-safe. A task enters on claim and leaves when its row is deleted or
    its copy is dropped; the claims held are renewed from here.

    Capacity is taken in two steps so concurrent claimers cannot overshoot it:
    :meth:`reserve` before claiming rows, :meth:`admit` (which settles the
    reservation) after the claim committed.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._revs: dict[str, int] = {}  # task id -> revision of the copy held
        self._reserved = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._revs)

    def room(self) -> int:
        return max(0, self.capacity - len(self._revs) - self._reserved)

    def reserve(self, count: int) -> int:
        """Reserve room for up to ``count`` tasks; returns how many were reserved."""
        with self._lock:
            granted = max(0, min(count, self.capacity - len(self._revs) - self._reserved))
            self._reserved += granted
            return granted

    def admit(self, claims: Sequence[Claim], reserved: int) -> list[Claim]:
        """Hold the claimed tasks and settle a reservation of ``reserved``.

        Returns the claims to queue: those not held yet, or held at another
        revision (the id was cancelled and created again; the old copy will
        be dropped when it fails to arm). A claim already held is not queued twice.
        """
        with self._lock:
            self._reserved = max(0, self._reserved - reserved)
            revs = self._revs
            fresh = [c for c in claims if revs.get(c.task.id) != c.rev]
            for claim in fresh:
                revs[claim.task.id] = claim.rev
        return fresh

    def release(self, reserved: int) -> None:
        """Give back a reservation that was not used (the claim failed)."""
        with self._lock:
            self._reserved = max(0, self._reserved - reserved)

    def drop(self, claims: Iterable[Claim]) -> None:
        """Forget copies that may not fire, unless a newer revision replaced them."""
        with self._lock:
            for claim in claims:
                if self._revs.get(claim.task.id) == claim.rev:
                    del self._revs[claim.task.id]

    def discard(self, ids: Iterable[str]) -> None:
        """Forget tasks whose rows were deleted (their events were confirmed)."""
        with self._lock:
            for task_id in ids:
                self._revs.pop(task_id, None)

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self._revs)
