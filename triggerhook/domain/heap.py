"""A min-heap of items by fire time. Pure and not thread-safe: its owner locks.

Entries are plain tuples ``(fire_at_ms, seq, item)`` so that ``heapq`` (C code)
does all comparisons; ``seq`` breaks ties in arrival order and keeps items
themselves from ever being compared. An item is anything with a ``fire_at_ms``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from typing import Generic, Protocol, TypeVar


class HasDue(Protocol):
    @property
    def fire_at_ms(self) -> int: ...


Item = TypeVar("Item", bound=HasDue)


class DueHeap(Generic[Item]):
    def __init__(self) -> None:
        self._entries: list[tuple[int, int, Item]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._entries)

    def push(self, task: Item, fire_at_ms: int | None = None) -> None:
        at = task.fire_at_ms if fire_at_ms is None else fire_at_ms
        heapq.heappush(self._entries, (at, next(self._seq), task))

    def push_many(self, tasks: Iterable[Item]) -> None:
        seq = self._seq
        entries = self._entries
        batch = [(t.fire_at_ms, next(seq), t) for t in tasks]
        # heapify is O(n) in the whole heap: only worth it for a large batch.
        if len(batch) * 4 < len(entries):
            for entry in batch:
                heapq.heappush(entries, entry)
        else:
            entries.extend(batch)
            heapq.heapify(entries)

    def next_fire_ms(self) -> int | None:
        """The earliest fire time, or None when empty."""
        return self._entries[0][0] if self._entries else None

    def pop_until(self, until_ms: float, limit: int) -> list[Item]:
        """Remove and return up to ``limit`` tasks with fire time <= ``until_ms``."""
        entries = self._entries
        out: list[Item] = []
        pop = heapq.heappop
        while entries and entries[0][0] <= until_ms and len(out) < limit:
            out.append(pop(entries)[2])
        return out

    def drain(self) -> list[Item]:
        """Remove and return every task, earliest first."""
        out = [entry[2] for entry in sorted(self._entries)]
        self._entries.clear()
        return out
