"""The dedup window's bounded storage: expired fired records deleted by the
owners of their shards (docs/design/flow-control.md, section 2).

A fired record (R5d) keeps its task's shard, so each instance sweeps only
the shards it holds, and two instances never sweep the same records. A
round runs at most every ``interval_ms``: batches of ``batch`` records in
expiry order (the ``th_fired_expiry`` key), until one comes back short; a
round that found more than ``max_batches`` full ones goes on at the next
step rather than holding its thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from triggerhook.interfaces import Clock, TaskStore

SWEEP_BATCH = 1000
SWEEP_MAX_BATCHES = 10


class FiredSweep:
    """Owned by the thread that calls :meth:`step` (the confirmer's, between
    its batches); ``owned`` answers the shards this instance holds now."""

    def __init__(
        self,
        store: TaskStore,
        owned: Callable[[], Sequence[int]],
        clock: Clock,
        interval_ms: int,
        *,
        batch: int = SWEEP_BATCH,
        max_batches: int = SWEEP_MAX_BATCHES,
    ) -> None:
        self._store = store
        self._owned = owned
        self._clock = clock
        self._interval_ms = interval_ms
        self._batch = batch
        self._max_batches = max_batches
        self._next_ms: float | None = None  # the first step sets it: a round an interval on
        self.swept = 0  # records deleted, since start

    def step(self) -> int:
        """A round (or the rest of one) if one is due; the records it deleted.
        A :class:`~triggerhook.errors.TransientError` leaves the round due."""
        now_ms = self._clock.now_ms()
        if self._next_ms is None:
            self._next_ms = now_ms + self._interval_ms
        if now_ms < self._next_ms:
            return 0
        shards = self._owned()
        swept = 0
        full = 0
        while shards and full < self._max_batches:
            deleted = self._store.sweep_fired(shards, now_ms, self._batch)
            swept += deleted
            self.swept += deleted
            if deleted < self._batch:
                break
            full += 1
        if full < self._max_batches:  # done: the next round after an interval
            self._next_ms = now_ms + self._interval_ms
        return swept
