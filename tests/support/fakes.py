"""In-memory fakes for unit tests of the engine's stages, and a polling helper.

* :class:`FakeClock`: wall-clock time the test sets (``now``) instead of reading it.
* :class:`FakeStore`: the package's in-memory store,
  ``SQLiteStore(":memory:")`` (the store kernel over SQLite, held to the same
  rules as the MySQL store by the contract suite in ``tests/contract``), with
  test controls: :attr:`FakeStore.rows` and :attr:`FakeStore.shards` read its
  tables,
  it records calls, :meth:`FakeStore.put` writes a row directly (unarmed, or
  armed), :meth:`FakeStore.fail_next` makes the next call(s) of a method
  raise; its "database" clock is the ``now_ms`` it is given (a FakeClock's).
* :class:`FakePublisher`: an :class:`~triggerhook.interfaces.EventPublisher`
  that publishes nothing (for an :class:`~triggerhook.engine.engine.Engine`
  whose scheduling into memory is under test, not its firing).
* :func:`wait_until`: poll a condition with short waits until a deadline.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from triggerhook.domain.arming import BOTTOM, Mark, ShardMarks, is_armed, shard_of
from triggerhook.domain.task import CancelResult, SeriesResult, Task, TaskInfo
from triggerhook.errors import SchemaError
from triggerhook.interfaces import (
    Acquired,
    Armed,
    Clock,
    DeferOutcome,
    Deferral,
    EventPublisher,
    Inserted,
    Lease,
    Move,
    Moved,
    NewRow,
    TaskStore,
    new_rev,
)
from triggerhook.store.rows import ShardRow as ShardColumns
from triggerhook.store.rows import TaskRow, content_of
from triggerhook.store.sqlite import SQLiteStore
from triggerhook.store.sqlite import sql as q

__all__ = [
    "DEFAULT_NOW_MS",
    "ArmCall",
    "FakeClock",
    "FakePublisher",
    "FakeStore",
    "LeaseCall",
    "ShardRow",
    "StoredRow",
]

DEFAULT_NOW_MS = 1_700_000_000_000.0

_START_MARKS = ShardMarks(BOTTOM, 1)  # the schema's defaults: nothing armed, generation 1


@dataclass(slots=True)
class StoredRow:
    """A snapshot of one th_tasks row: ``task`` its content and attempts (as
    armed, but for the epoch), and the row's shard, revision, gen and fire time."""

    task: Task
    shard: int
    rev: int
    gen: int
    fire_ms: int

    @property
    def mark(self) -> Mark:
        return (self.fire_ms, self.task.id)


@dataclass(slots=True)
class ShardRow:
    """A snapshot of one th_shards row."""

    owner: str | None = None
    epoch: int = 0
    lease_until_ms: int = 0
    marks: ShardMarks = _START_MARKS
    took: ShardMarks = _START_MARKS


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
class ArmCall:
    instance: str
    leases: tuple[Lease, ...]
    horizon_ms: int
    limit: int
    urgent_ms: int | None = None
    unanswered: Mapping[Lease, frozenset[str]] | None = None


@dataclass(frozen=True, slots=True)
class LeaseCall:
    """A call of renew (with ``lease_ms``) or release (``lease_ms`` 0)."""

    instance: str
    leases: tuple[Lease, ...]
    lease_ms: int = 0


class FakeStore(SQLiteStore):
    """The in-memory store (``SQLiteStore(":memory:")``), with test controls:
    snapshots of its tables, recorded calls, injected failures.

    ``now_ms`` is the "database" clock (pass a :class:`FakeClock`'s
    ``now_ms``; default: the wall clock). Every TaskStore method first raises
    what :meth:`fail_next` queued for it; the calls that got past that are
    recorded in ``*_calls`` (a failed call is not recorded).
    """

    def __init__(
        self,
        now_ms: Callable[[], float] | None = None,
        shard_count: int = 64,
        default_routing_key: str = "",
    ) -> None:
        super().__init__(":memory:", default_routing_key, shard_count, now_ms)
        self._failures: defaultdict[str, deque[BaseException]] = defaultdict(deque)
        self.insert_calls: list[list[NewRow]] = []
        self.arm_calls: list[ArmCall] = []
        self.inherited_calls: list[tuple[Acquired, Mark | None, int]] = []
        self.delete_calls: list[list[str]] = []
        self.defer_calls: list[list[Deferral]] = []
        self.acquire_calls: list[tuple[str, int, int]] = []
        self.renew_calls: list[LeaseCall] = []
        self.release_calls: list[LeaseCall] = []
        self.schema_ok = True
        self.closed = False
        self.count_calls = 0

    # -- test controls ------------------------------------------------------------

    @property
    def rows(self) -> dict[str, StoredRow]:
        """th_tasks, read now (a snapshot: read it again after a call)."""
        with self._transaction(write=False) as cur:
            cur.execute(f"SELECT {q.TASK_COLUMNS} FROM th_tasks")
            found = [TaskRow(*r) for r in cur.fetchall()]
        return {row.id: self._stored(row) for row in found}

    def _stored(self, row: TaskRow) -> StoredRow:
        content = content_of((*row[:4], row.meta), self._default_routing_key)
        task = content.replace(attempts=row.attempts)
        return StoredRow(task, row.shard, row.rev, row.gen, row.fire_ms)

    @property
    def shards(self) -> list[ShardRow]:
        """th_shards, indexed by shard, read now (a snapshot)."""
        return [
            ShardRow(r.owner, r.epoch, r.lease_until_ms, r.marks, r.took)
            for r in self._shard_rows()
        ]

    def _shard_rows(self) -> list[ShardColumns]:
        with self._transaction(write=False) as cur:
            cur.execute(q.SELECT_SHARDS)
            return [ShardColumns(*r) for r in cur.fetchall()]

    def fail_next(self, method: str, *errors: BaseException) -> None:
        """The next ``len(errors)`` calls of ``method`` raise these errors, in order."""
        if not hasattr(self, method):
            raise AttributeError(method)
        with self._lock:
            self._failures[method].extend(errors)

    def shard_of(self, task_id: str) -> int:
        return shard_of(task_id, self.shard_count())

    def put(
        self,
        task: Task,
        *,
        rev: int | None = None,
        fire_ms: int | None = None,
        armed: bool = False,
    ) -> int:
        """Store a row directly, as if inserted earlier; returns its revision.

        The row is unarmed (its shard's current generation), firing at
        ``fire_ms`` (default: its due time), with ``task.attempts``. Without
        ``rev`` it gets a fresh revision (a new row, as an insert would
        write); pass an existing row's to change it in place. With ``armed``
        it is armed under its shard's marks, as if an arming pass had taken
        it: its gen is the one before the shard's, and the shard's watermark
        is raised to the row if below it (which arms, too, any row of an
        earlier generation in between; put those armed as well, or first).
        """
        row_rev = new_rev() if rev is None else rev
        shard = self.shard_of(task.id)
        fire = task.due_ms if fire_ms is None else fire_ms
        with self._transaction() as cur:
            cur.execute(
                "SELECT armed_ms, armed_id, arm_gen FROM th_shards WHERE shard = ?", (shard,)
            )
            armed_ms, armed_id, gen = cur.fetchone()
            row_gen = gen - 1 if armed else gen
            head = (task.id, shard, row_rev, row_gen, fire, task.due_ms, task.routing_key or None)
            cur.execute(
                "INSERT OR REPLACE INTO th_tasks"
                " (id, shard, rev, gen, fire_ms, due_ms, routing_key, payload, meta, attempts)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)",
                (*head, task.payload or None, task.attempts),
            )
            if armed:
                top = max((armed_ms, armed_id), (fire, task.id))
                cur.execute(
                    "UPDATE th_shards SET armed_ms = ?, armed_id = ? WHERE shard = ?",
                    (*top, shard),
                )
        return row_rev

    def row(self, task_id: str) -> StoredRow | None:
        with self._transaction(write=False) as cur:
            cur.execute(f"SELECT {q.TASK_COLUMNS} FROM th_tasks WHERE id = ?", (task_id,))
            found = cur.fetchone()
        return None if found is None else self._stored(TaskRow(*found))

    def ids(self) -> set[str]:
        return set(self.rows)

    def is_armed(self, task_id: str) -> bool:
        """The row is armed by its shard's marks (False: no such row)."""
        with self._lock:
            row = self.row(task_id)
            if row is None:
                return False
            return is_armed(row.mark, row.gen, self._shard_rows()[row.shard].marks)

    def deleted_ids(self) -> list[str]:
        """Every id passed to delete_fired by a call that was not failed, in order."""
        with self._lock:
            return [tid for batch in self.delete_calls for tid in batch]

    def _maybe_fail(self, method: str) -> None:
        # Called with self._lock held.
        queue = self._failures.get(method)
        if queue:
            raise queue.popleft()

    # -- TaskStore: each call may fail first, and some are recorded -----------------
    # (self._lock is re-entrant: it is the store's own, held for each transaction)

    def insert(
        self,
        rows: Sequence[NewRow],
        atomic: bool,
        now_ms: float | None = None,
        *,
        fired_ok: bool = False,
    ) -> list[Inserted]:
        with self._lock:
            self._maybe_fail("insert")
            self.insert_calls.append(list(rows))
            return super().insert(rows, atomic, now_ms, fired_ok=fired_ok)

    def arm(
        self,
        instance: str,
        leases: Sequence[Lease],
        horizon_ms: int,
        limit: int,
        urgent_ms: int | None = None,
        unanswered: Mapping[Lease, frozenset[str]] | None = None,
    ) -> Armed:
        with self._lock:
            self._maybe_fail("arm")
            call = ArmCall(instance, tuple(leases), horizon_ms, limit, urgent_ms, unanswered)
            self.arm_calls.append(call)
            return super().arm(instance, leases, horizon_ms, limit, urgent_ms, unanswered)

    def inherited(
        self, acquired: Acquired, after: Mark | None, limit: int
    ) -> tuple[list[Task], Mark | None]:
        with self._lock:
            self._maybe_fail("inherited")
            self.inherited_calls.append((acquired, after, limit))
            return super().inherited(acquired, after, limit)

    def delete_fired(self, fired: Sequence[tuple[str, int]]) -> int:
        with self._lock:
            self._maybe_fail("delete_fired")
            self.delete_calls.append([task_id for task_id, _rev in fired])
            return super().delete_fired(fired)

    def defer(self, instance: str, deferrals: Sequence[Deferral]) -> list[DeferOutcome]:
        with self._lock:
            self._maybe_fail("defer")
            self.defer_calls.append(list(deferrals))
            return super().defer(instance, deferrals)

    def cancel(self, task_ids: Sequence[str]) -> list[CancelResult]:
        with self._lock:
            self._maybe_fail("cancel")
            return super().cancel(task_ids)

    def reschedule(self, moves: Sequence[Move]) -> list[Moved]:
        with self._lock:
            self._maybe_fail("reschedule")
            return super().reschedule(moves)

    def pause(self, task_ids: Sequence[str]) -> list[SeriesResult]:
        with self._lock:
            self._maybe_fail("pause")
            return super().pause(task_ids)

    def resume(self, task_ids: Sequence[str], now_ms: float) -> list[SeriesResult]:
        with self._lock:
            self._maybe_fail("resume")
            return super().resume(task_ids, now_ms)

    def acquire(self, instance: str, count: int, lease_ms: int) -> list[Acquired]:
        with self._lock:
            self._maybe_fail("acquire")
            self.acquire_calls.append((instance, count, lease_ms))
            return super().acquire(instance, count, lease_ms)

    def renew(self, instance: str, leases: Sequence[Lease], lease_ms: int) -> list[Lease]:
        with self._lock:
            self._maybe_fail("renew")
            self.renew_calls.append(LeaseCall(instance, tuple(leases), lease_ms))
            return super().renew(instance, leases, lease_ms)

    def release(self, instance: str, leases: Sequence[Lease]) -> int:
        with self._lock:
            self._maybe_fail("release")
            self.release_calls.append(LeaseCall(instance, tuple(leases)))
            return super().release(instance, leases)

    def register(self, instance: str, token: int, host: str, pid: int, lease_ms: int) -> None:
        with self._lock:
            self._maybe_fail("register")
            super().register(instance, token, host, pid, lease_ms)

    def heartbeat(self, instance: str, token: int, lease_ms: int) -> bool:
        with self._lock:
            self._maybe_fail("heartbeat")
            return super().heartbeat(instance, token, lease_ms)

    def leave(self, instance: str, token: int) -> None:
        with self._lock:
            self._maybe_fail("leave")
            super().leave(instance, token)

    def live_members(self) -> int:
        with self._lock:
            self._maybe_fail("live_members")
            return super().live_members()

    def count_tasks(self) -> int:
        with self._lock:
            self._maybe_fail("count_tasks")
            self.count_calls += 1
            return super().count_tasks()

    def earliest_due_ms(self) -> int | None:
        with self._lock:
            self._maybe_fail("earliest_due_ms")
            return super().earliest_due_ms()

    def database_time_us(self) -> int:
        with self._lock:
            self._maybe_fail("database_time_us")
            return super().database_time_us()

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
        self.wedged = False  # a test's stand-in for a publisher thread that stopped beating

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

    def stalled(self, now_s: float, max_silence_s: float) -> bool:
        return self.wedged

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
