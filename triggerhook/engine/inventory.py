"""What this instance holds in memory: task ids and row revisions, bounded."""

from __future__ import annotations

import threading
from collections import OrderedDict
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
        # task id -> when its claim was made or last renewed (epoch ms), oldest
        # first, so finding the claims due for renewal costs only those claims.
        self._claimed_ms: OrderedDict[str, float] = OrderedDict()
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

    def admit(self, claims: Sequence[Claim], reserved: int, claimed_ms: float = 0.0) -> list[Claim]:
        """Hold the claimed tasks and settle a reservation of ``reserved``.

        ``claimed_ms`` is when the claims were made (0: unknown, so they are
        renewed at the next chance). Returns the claims to queue: those not
        held yet, or held at another revision (the id was cancelled and created
        again; the old copy is dropped when it fails to arm). A claim already
        held is not queued twice.
        """
        with self._lock:
            self._reserved = max(0, self._reserved - reserved)
            revs = self._revs
            fresh = [c for c in claims if revs.get(c.task.id) != c.rev]
            for claim in fresh:
                revs[claim.task.id] = claim.rev
            self._stamp((c.task.id for c in claims if c.task.id in revs), claimed_ms)
        return fresh

    def release(self, reserved: int) -> None:
        """Give back a reservation that was not used (the claim failed)."""
        with self._lock:
            self._reserved = max(0, self._reserved - reserved)

    def drop(self, claims: Iterable[Claim]) -> None:
        """Forget copies that may not fire, unless a newer revision replaced them."""
        self.forget((claim.task.id, claim.rev) for claim in claims)

    def rev_of(self, task_id: str) -> int | None:
        """The revision of the copy held of ``task_id`` (None: not held)."""
        return self._revs.get(task_id)

    def forget(self, held: Iterable[tuple[str, int]]) -> None:
        """Forget (task id, revision) copies, unless a newer revision replaced them."""
        with self._lock:
            for task_id, rev in held:
                if self._revs.get(task_id) == rev:
                    self._forget(task_id)

    def claimed_before(self, before_ms: float) -> list[str]:
        """Ids whose claims were made or renewed at or before ``before_ms``."""
        out = []
        with self._lock:
            for task_id, claimed_ms in self._claimed_ms.items():
                if claimed_ms > before_ms:
                    break
                out.append(task_id)
        return out

    def renewed(self, ids: Iterable[str], renewed_ms: float) -> None:
        with self._lock:
            self._stamp((i for i in ids if i in self._revs), renewed_ms)

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self._revs)

    def _stamp(self, ids: Iterable[str], at_ms: float) -> None:
        stamps = self._claimed_ms
        for task_id in ids:
            stamps[task_id] = at_ms
            stamps.move_to_end(task_id)

    def _forget(self, task_id: str) -> None:
        if self._revs.pop(task_id, None) is not None:
            del self._claimed_ms[task_id]
