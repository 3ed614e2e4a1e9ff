"""In-memory fakes for unit tests of the engine's stages, and a polling helper.

* :class:`FakeClock`: wall-clock time the test sets (``now``) instead of reading it.
* :class:`FakeStore`: the package's in-memory store,
  :class:`triggerhook.store.memory.MemoryStore` (held to the same rules as the
  MySQL store by the contract suite in ``tests/contract``), with test controls:
  it records calls, :meth:`FakeStore.put` writes a row directly, and
  :meth:`FakeStore.fail_next` makes the next call(s) of a method raise.
* :class:`FakePublisher`: an :class:`~triggerhook.interfaces.EventPublisher`
  that publishes nothing (for an :class:`~triggerhook.engine.engine.Engine`
  whose scheduling into memory is under test, not its firing).
* :func:`wait_until`: poll a condition with short waits until a deadline.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from triggerhook.domain.task import CancelResult, Task, TaskInfo
from triggerhook.errors import SchemaError
from triggerhook.interfaces import (
    Claim,
    Clock,
    Deferral,
    EventPublisher,
    InsertOutcome,
    Move,
    Moved,
    NewRow,
    TaskStore,
    new_rev,
)
from triggerhook.store.memory import MemoryStore, StoredRow

__all__ = [
    "DEFAULT_NOW_MS",
    "ClaimCall",
    "FakeClock",
    "FakePublisher",
    "FakeStore",
    "RenewCall",
    "StoredRow",
]

DEFAULT_NOW_MS = 1_700_000_000_000.0


class FakeClock:
    """A clock that stands still: ``now`` is the time in epoch ms; set or advance it.

    ``reads`` counts calls of :meth:`now_ms`, so a test can tell that a thread
    has reached the point where it reads the clock.
    """

    def __init__(self, now_ms: float = DEFAULT_NOW_MS) -> None:
        self.now = now_ms
        self.reads = 0

    def now_ms(self) -> float:
        self.reads += 1
        return self.now

    def bounded(self) -> bool:
        return True

    def set(self, now_ms: float) -> None:
        self.now = now_ms

    def advance(self, delta_ms: float) -> None:
        self.now += delta_ms


@dataclass(frozen=True, slots=True)
class ClaimCall:
    instance: str
    now_ms: int
    horizon_ms: int
    arm_until_ms: int
    lease_until_ms: int
    limit: int


@dataclass(frozen=True, slots=True)
class RenewCall:
    instance: str
    ids: tuple[str, ...]
    lease_until_ms: int


class FakeStore(MemoryStore):
    """The in-memory :class:`~triggerhook.store.memory.MemoryStore`, with test
    controls: direct access to its rows, recorded calls, injected failures."""

    def __init__(self) -> None:
        super().__init__()
        self._failures: defaultdict[str, deque[BaseException]] = defaultdict(deque)
        self.claim_calls: list[ClaimCall] = []
        self.arm_calls: list[list[str]] = []
        self.delete_calls: list[list[str]] = []
        self.renew_calls: list[RenewCall] = []
        self.release_calls: list[tuple[str, list[str] | None]] = []
        self.schema_ok = True
        self.closed = False
        self.count_calls = 0

    # -- test controls ------------------------------------------------------------

    @property
    def rows(self) -> dict[str, StoredRow]:
        """The table itself (live: read it while no call is running)."""
        return self._rows

    def fail_next(self, method: str, *errors: BaseException) -> None:
        """The next ``len(errors)`` calls of ``method`` raise these errors, in order."""
        if not hasattr(self, method):
            raise AttributeError(method)
        with self._lock:
            self._failures[method].extend(errors)

    def put(
        self,
        task: Task,
        claimed_by: str | None = None,
        claim_until_ms: int = 0,
        firing: bool = False,
        rev: int | None = None,
    ) -> int:
        """Store a row directly, as if inserted earlier; returns its revision.

        Without ``rev`` the row gets a fresh one (a new row, as an insert would
        write); pass the revision of an existing row to change it in place.
        """
        row_rev = new_rev() if rev is None else rev
        with self._lock:
            self._rows[task.id] = StoredRow(task, claimed_by, claim_until_ms, firing, row_rev)
        return row_rev

    def row(self, task_id: str) -> StoredRow | None:
        with self._lock:
            return self._rows.get(task_id)

    def ids(self) -> set[str]:
        with self._lock:
            return set(self._rows)

    def deleted_ids(self) -> list[str]:
        """Every id passed to delete_fired by a call that succeeded, in order."""
        with self._lock:
            return [tid for batch in self.delete_calls for tid in batch]

    def _maybe_fail(self, method: str) -> None:
        # Called with self._lock held.
        queue = self._failures.get(method)
        if queue:
            raise queue.popleft()

    # -- TaskStore: each call may fail first, and some are recorded -----------------
    # (self._lock is re-entrant: the whole call is one "transaction", as in MemoryStore)

    def insert(
        self, rows: Sequence[NewRow], instance: str, lease_until_ms: int, atomic: bool
    ) -> list[InsertOutcome]:
        with self._lock:
            self._maybe_fail("insert")
            return super().insert(rows, instance, lease_until_ms, atomic)

    def claim(
        self,
        instance: str,
        now_ms: int,
        horizon_ms: int,
        arm_until_ms: int,
        lease_until_ms: int,
        limit: int,
    ) -> list[Claim]:
        with self._lock:
            self._maybe_fail("claim")
            self.claim_calls.append(
                ClaimCall(instance, now_ms, horizon_ms, arm_until_ms, lease_until_ms, limit)
            )
            return super().claim(instance, now_ms, horizon_ms, arm_until_ms, lease_until_ms, limit)

    def arm(self, instance: str, claims: Sequence[Claim]) -> list[Claim]:
        with self._lock:
            self._maybe_fail("arm")
            self.arm_calls.append([c.task.id for c in claims])
            return super().arm(instance, claims)

    def delete_fired(self, fired: Sequence[tuple[str, int]]) -> int:
        with self._lock:
            self._maybe_fail("delete_fired")
            self.delete_calls.append([task_id for task_id, _rev in fired])
            return super().delete_fired(fired)

    def defer(self, instance: str, deferrals: Sequence[Deferral]) -> int:
        with self._lock:
            self._maybe_fail("defer")
            return super().defer(instance, deferrals)

    def renew_claims(self, instance: str, ids: Sequence[str], lease_until_ms: int) -> int:
        with self._lock:
            self._maybe_fail("renew_claims")
            self.renew_calls.append(RenewCall(instance, tuple(ids), lease_until_ms))
            return super().renew_claims(instance, ids, lease_until_ms)

    def release_claims(self, instance: str, ids: Sequence[str] | None = None) -> int:
        with self._lock:
            self._maybe_fail("release_claims")
            self.release_calls.append((instance, None if ids is None else list(ids)))
            return super().release_claims(instance, ids)

    def cancel(self, task_ids: Sequence[str]) -> list[CancelResult]:
        with self._lock:
            self._maybe_fail("cancel")
            return super().cancel(task_ids)

    def reschedule(self, moves: Sequence[Move], instance: str, lease_until_ms: int) -> list[Moved]:
        with self._lock:
            self._maybe_fail("reschedule")
            return super().reschedule(moves, instance, lease_until_ms)

    def count_tasks(self) -> int:
        with self._lock:
            self._maybe_fail("count_tasks")
            self.count_calls += 1
            return super().count_tasks()

    def earliest_due_ms(self) -> int | None:
        with self._lock:
            self._maybe_fail("earliest_due_ms")
            return super().earliest_due_ms()

    def check_schema(self) -> None:
        with self._lock:
            self._maybe_fail("check_schema")
            if not self.schema_ok:
                raise SchemaError("fake store: schema not current")

    def get(self, task_id: str) -> TaskInfo | None:
        with self._lock:
            self._maybe_fail("get")
            return super().get(task_id)

    def close(self) -> None:
        self.closed = True


class FakePublisher:
    """An event publisher without a broker: it never takes anything from the
    send buffer, so fired tasks stay there for the test to look at."""

    def __init__(self) -> None:
        self.started = False
        self.finished = False
        self.wakes = 0

    def start(self) -> None:
        self.started = True

    def wake(self) -> None:
        self.wakes += 1

    def finish(self, deadline_s: float) -> None:
        self.finished = True

    def join(self, timeout_s: float | None = None) -> bool:
        return True

    def is_alive(self) -> bool:
        return self.started and not self.finished

    def is_connected(self) -> bool:
        return self.is_alive()

    def counters(self) -> dict[str, int]:
        return {}

    def take_lateness(self) -> list[float]:
        return []

    def unconfirmed(self) -> int:
        return 0


if TYPE_CHECKING:  # mypy checks the fakes against the protocols they stand in for
    _store: TaskStore = FakeStore()
    _clock: Clock = FakeClock()
    _publisher: EventPublisher = FakePublisher()
