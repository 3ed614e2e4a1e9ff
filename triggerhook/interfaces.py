"""The seams between the engine and the outside world.

The engine and the library API depend only on these protocols; the MySQL and
AMQP adapters implement them, and unit tests use in-memory fakes. This module
sits below the engine and the adapters (it imports only domain/, runtime/ and
errors), so they meet here without importing each other.

Errors: every method may raise :class:`~triggerhook.errors.StoreUnavailable`
(transient: the caller may retry) or :class:`~triggerhook.errors.StoreError`
(permanent). Nothing else escapes an adapter.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from triggerhook.domain.arming import Mark, Placement, ShardMarks
from triggerhook.domain.listing import Key, TaskFilter, Timeline
from triggerhook.domain.task import (
    CancelResult,
    InsertOutcome,
    OnConflict,
    RescheduleResult,
    SeriesResult,
    Task,
    TaskInfo,
)
from triggerhook.errors import StoreUnavailable
from triggerhook.runtime.interrupt import Interrupt
from triggerhook.runtime.points import Point


class Clock(Protocol):
    def now_ms(self) -> float:
        """Wall-clock time in (fractional) milliseconds since the Unix epoch:
        the database's, by a lower bound (see :class:`triggerhook.clock.DatabaseClock`)."""
        ...

    def bounded(self) -> bool:
        """Its error is within the configured bound: tasks may be fired by it."""
        ...


def new_rev() -> int:
    """A fresh row revision: random, so a row deleted and created again under
    the same id never has the revision an old in-memory copy carries."""
    return random.getrandbits(63)


@dataclass(frozen=True, slots=True)
class NewRow:
    """A task to create, at revision ``rev``, and what to do if its id exists."""

    task: Task
    rev: int = field(default_factory=new_rev)
    on_conflict: OnConflict = OnConflict.ERROR


@dataclass(frozen=True, slots=True)
class Inserted:
    """A create's outcome, and the task it answers with: the row's own
    (CREATED, EXISTS, REPLACED, ALREADY_FIRED) or the one stored under its
    id (KEPT, CONFLICT, TOO_LATE); ``fired_ms`` (ALREADY_FIRED only): when
    the id fired, epoch ms by the firing engine's clock."""

    outcome: InsertOutcome
    task: Task
    fired_ms: int | None = None


@dataclass(frozen=True, slots=True)
class OutboxMoved:
    """What one move of the outbox did (R6o): ``taken`` rows left the
    outbox; ``inserted``, the answer of each readable one's insert."""

    taken: int
    inserted: list[Inserted]


@dataclass(frozen=True, slots=True)
class Move:
    """Reschedule the task ``task_id`` to ``due_ms``, with a new ``rev``."""

    task_id: str
    due_ms: int
    rev: int = field(default_factory=new_rev)


@dataclass(frozen=True, slots=True)
class Moved:
    """A reschedule's outcome; ``task`` is the task as now stored when it moved."""

    result: RescheduleResult
    task: Task | None = None


# -- shards (docs/design/ownership.md) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Lease:
    """This instance's hold on a shard: ``epoch`` is the fencing token."""

    shard: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Acquired:
    """A shard just acquired, and the marks it had then: rows armed under
    them (by an earlier epoch) are inherited and fire again (R3)."""

    lease: Lease
    took: ShardMarks


@dataclass(frozen=True, slots=True)
class Armed:
    """One arming pass: the tasks it armed (each with ``shard``, ``epoch``
    and ``rev`` set, earliest first per shard), the shards found no longer
    ours (fenced: drop them), and how many of the tasks were armed by a
    write of their own row rather than by their shard's marks (the rare
    settle case of :class:`~triggerhook.domain.arming.ArmPlan`). ``skipped``:
    no pass was made, a read found nothing to arm by the time asked."""

    tasks: list[Task]
    lost: list[int]
    settled: int = 0
    skipped: bool = False


class ArmUnanswered(StoreUnavailable):
    """An arming pass failed after it took rows, transiently: its COMMIT may
    have gone through with the answer lost (a failover cuts the connection),
    and then those rows are armed, yet no later read finds them (R3a).
    ``taken``: the ids it took, per lease. The armer keeps them and hands
    them to its next passes (``TaskStore.arm``'s ``unanswered``) until a
    pass over that lease settles them."""

    def __init__(self, message: str, taken: Mapping[Lease, frozenset[str]]) -> None:
        super().__init__(message)
        self.taken = dict(taken)


@dataclass(frozen=True, slots=True)
class Deferral:
    """Put back the armed row ``task.id`` at ``task.rev`` (armed under lease
    ``task.shard``/``task.epoch``) whose event the broker did not take: to
    fire again from ``not_before_ms``, at ``new_rev``. ``postponed``: not a
    failed delivery but a copy a rate limit holds back past the arming
    horizon (R8p): the same move, with no failed attempt counted."""

    task: Task
    not_before_ms: int
    new_rev: int = field(default_factory=new_rev)
    postponed: bool = False


@dataclass(frozen=True, slots=True)
class NameHolder:
    """The process holding an instance name (its ``th_members`` row, R1), as
    read at ``now_ms``: the database's time of the read, the clock the
    heartbeat is on."""

    token: int
    host: str
    pid: int
    heartbeat_until_ms: int
    now_ms: int

    @property
    def live(self) -> bool:
        """Its heartbeat had not expired when read (as ``live_members`` counts)."""
        return self.heartbeat_until_ms >= self.now_ms


class DeferOutcome(enum.Enum):
    DEFERRED = "deferred"  # rewritten unarmed; it left this instance's memory
    INHERITED = "inherited"  # armed in an earlier epoch: stays armed, retry from memory
    GONE = "gone"  # the lease or the row at that revision is no longer ours: drop it


class TaskStore(Protocol):
    """The task table, the shard table and the member table.

    Every "now" below is the database server's clock, read in SQL.
    """

    def shard_count(self) -> int:
        """N, fixed when the database was created."""
        ...

    def placement(self, fresh: bool = False) -> Placement:
        """Which shard a row goes to, and which a write by id locks: N, and
        whether the database has the rate-limited lane (docs/design/flow-control.md,
        3b). Read once and kept; read again when ``fresh`` (the keeper, each
        round) or when a write finds the lane added since."""
        ...

    def open_lanes(self, limited: Callable[[str], bool]) -> None:
        """Add the rate-limited lane's shard rows where missing; from now on
        this instance writes a task whose routing key ``limited`` names there.
        TransientError, StoreError as any write."""
        ...

    def insert(
        self,
        rows: Sequence[NewRow],
        atomic: bool,
        now_ms: float | None = None,
        *,
        fired_ok: bool = False,
    ) -> list[Inserted]:
        """Insert rows in one transaction, reporting each row's outcome; each
        row is written unarmed (R6) in its shard's current generation. An id
        that exists is answered by the row's ``on_conflict``: the same
        content is EXISTS; else CONFLICT, KEPT, or (R6r) REPLACED, its row
        rewritten unarmed at the new revision, or TOO_LATE when armed. An id
        with a live fired record (R5d: it fired within its dedup window, the
        record's expiry after ``now_ms``; None: this host's wall clock) is
        ALREADY_FIRED, and nothing of it is written. The rows apply in
        order, as if each came alone after those before it.

        With ``atomic`` any CONFLICT, TOO_LATE or ALREADY_FIRED rolls
        everything back and raises :class:`~triggerhook.errors.ConflictError`
        (``index``: the first such row; :class:`~triggerhook.errors.TooLateError`
        for TOO_LATE, :class:`~triggerhook.errors.AlreadyFiredError` for
        ALREADY_FIRED, unless ``fired_ok``: then such a row is only answered,
        nothing of it written, and the others are: a backfill's copies).
        """
        ...

    def arm(
        self,
        instance: str,
        leases: Sequence[Lease],
        horizon_ms: int,
        limit: int,
        urgent_ms: int | None = None,
        unanswered: Mapping[Lease, frozenset[str]] | None = None,
    ) -> Armed:
        """One arming pass (R3) over the leased shards, fenced by each lease:
        arms up to ``limit`` rows due by ``horizon_ms`` in all, by
        :func:`~triggerhook.domain.arming.plan_arming` per shard.

        ``unanswered`` (R3a): ids that earlier passes of this instance took
        in a lease of ``leases`` and whose answer was lost
        (:class:`ArmUnanswered`). In each shard still held at that lease's
        epoch, those armed now are taken first (their pass committed; no
        read finds them again), within ``limit``, before the reads; the
        others were rolled back, and the reads find them. A pass given any
        is never skipped.

        With ``urgent_ms``: when a read without locks finds no row to arm due
        by then, no pass is made (``Armed.skipped``); a store may also skip
        an idle pass so without being asked. Skipping is always safe (the
        rows are armed by a later pass); it saves the pass's writes.

        A pass that fails after it took rows raises :class:`ArmUnanswered`
        (when the failure is transient) naming them: it may have committed."""
        ...

    def inherited(
        self, acquired: Acquired, after: Mark | None, limit: int
    ) -> tuple[list[Task], Mark | None]:
        """Rows armed before ``acquired`` began (R3), in mark order after
        ``after`` (None: from the first), at most ``limit``; each with
        ``shard``, ``epoch`` (the acquired lease's) and ``rev`` set; and the
        mark of the last row returned (None: none), where the next read goes on."""
        ...

    def delete_fired(self, fired: Sequence[tuple[str, int]]) -> int:
        """Delete the rows whose events the broker confirmed, given as (id,
        revision): a row of the id at another revision (a newer incarnation)
        stays. Not fenced (R5)."""
        ...

    def delete_recorded(self, fired: Sequence[Task], now_ms: float) -> int:
        """R5d: :meth:`delete_fired` for tasks with a dedup window (each as
        fired: id, revision, ``meta.dedup_window_ms``), and for each row
        deleted a fired record (id, revision, ``now_ms``, expiry ``now_ms`` +
        window) in the same transaction, replacing an older record of the
        id. The number deleted."""
        ...

    def move_outbox(self, limit: int, now_ms: float) -> OutboxMoved:
        """R6o (docs/design/flow-control.md, section 6): at most ``limit``
        of the oldest outbox rows whose callers committed (rows another
        mover holds are skipped), each inserted as :meth:`insert` does
        (``now_ms`` its clock) and deleted from the outbox, in one transaction."""
        ...

    def outbox_waiting(self) -> tuple[int | None, int]:
        """The first waiting outbox row's ``created_ms`` (None: none) and how
        many wait (counted up to 1,000,000), unlocked: the metrics' figures."""
        ...

    def sweep_fired(self, shards: Sequence[int], now_ms: float, limit: int) -> int:
        """Delete at most ``limit`` fired records of these shards that expired
        by ``now_ms`` (the dedup window's bounded storage); the number deleted."""
        ...

    def advance(self, fired: Sequence[Task], now_ms: float) -> int:
        """R5s: the rows of series whose occurrences' events the broker
        confirmed (each task as fired: its id and revision). A row still at
        that revision is rewritten, in one transaction with the others, to
        its next occurrence (unarmed, new revision, attempts 0, occurrence
        number one up), or deleted when the series ended (or was stopped);
        any other is left alone. Not fenced by the epoch (by the revision,
        as R5). Returns the rows written or deleted."""
        ...

    def defer(self, instance: str, deferrals: Sequence[Deferral]) -> list[DeferOutcome]:
        """R8: rows whose events were not delivered, one outcome each; and
        R8p: rows whose copies a rate limit postponed (``Deferral.postponed``:
        the same outcomes, ``attempts`` kept)."""
        ...

    def cancel(self, task_ids: Sequence[str]) -> list[CancelResult]:
        """Cancel in one transaction (R7); one result per id (an id given
        twice is cancelled once, then not found). A series too late to
        cancel (its occurrence is being published) is stopped: that
        occurrence is its last."""
        ...

    def reschedule(self, moves: Sequence[Move]) -> list[Moved]:
        """Move unarmed tasks to new due times in one transaction (R6: a new
        revision, the shard's current generation); one outcome per move. An
        armed task is TOO_LATE; an id moved twice in one call takes the last move."""
        ...

    def pause(self, task_ids: Sequence[str]) -> list[SeriesResult]:
        """Pause series in one transaction (domain/series.py): an unarmed row
        is parked (R6's move), an armed one marked, so that its occurrence
        still fires and none after it (PAUSED_AFTER_THIS); one result per id."""
        ...

    def resume(self, task_ids: Sequence[str], now_ms: float) -> list[SeriesResult]:
        """Resume paused series in one transaction: each at its next occurrence
        by its catch-up policy (copies of missed occurrences under "all")."""
        ...

    # -- shard leases (R2) and members (R1) --------------------------------------

    def acquire(self, instance: str, count: int, lease_ms: int) -> list[Acquired]:
        """Take up to ``count`` free or expired shards, each with a new epoch
        and a lease of ``lease_ms`` from now."""
        ...

    def renew(self, instance: str, leases: Sequence[Lease], lease_ms: int) -> list[Lease]:
        """Extend the leases still ours (same epoch) to ``lease_ms`` from now;
        returns those. One not returned was lost: drop it at once."""
        ...

    def release(self, instance: str, leases: Sequence[Lease]) -> int:
        """Give up leases still ours (same epoch) for others to take."""
        ...

    def register(self, instance: str, token: int, host: str, pid: int, lease_ms: int) -> None:
        """Hold the instance name for ``lease_ms``; a name whose holder's
        heartbeat expired is taken over. Raises
        :class:`~triggerhook.errors.InstanceNameInUse`."""
        ...

    def name_holder(self, instance: str) -> NameHolder | None:
        """Who holds ``instance`` (live or expired), with the database's time
        of the read; None: nobody (never registered, or left)."""
        ...

    def take_over_name(
        self, instance: str, token: int, host: str, pid: int, lease_ms: int, holder: NameHolder
    ) -> bool:
        """Compare-and-set (R1): hold ``instance`` under ``token`` for
        ``lease_ms`` from now (as :meth:`register` does), taking it from
        ``holder``, live or not, only if its row is still exactly as read: the
        same token and heartbeat (it did not renew, leave, or pass to another
        process since). False: nothing changed; read the row again. Of two
        callers with the same ``holder``, at most one gets True."""
        ...

    def heartbeat(self, instance: str, token: int, lease_ms: int) -> bool:
        """Extend the hold on the name; False: another process took it over."""
        ...

    def leave(self, instance: str, token: int) -> None:
        """Give the name up (graceful stop)."""
        ...

    def live_members(self) -> int:
        """Members whose heartbeat has not expired."""
        ...

    # -- lookups ------------------------------------------------------------------

    def check_schema(self) -> None:
        """Raise :class:`~triggerhook.errors.SchemaError` unless the schema is current."""
        ...

    def get(self, task_id: str) -> TaskInfo | None: ...

    def count_tasks(self) -> int:
        """Every task in the database (an exact, and so not free, COUNT)."""
        ...

    # -- finding tasks (domain/listing.py; unlocked reads, a snapshot each) ------------
    # Each is bounded: a read longer than the store's listing time limit raises
    # TooCostly; one whose ``interrupt`` is set stops (its statement cut short)
    # and raises Interrupted.

    def list_tasks(
        self, where: TaskFilter, after: Key | None, limit: int, interrupt: Interrupt | None = None
    ) -> list[TaskInfo]:
        """Up to ``limit`` tasks matching ``where``, in (due time, id) order,
        after the key ``after`` (None: from the first)."""
        ...

    def match_keys(
        self, where: TaskFilter, after: Key | None, limit: int, interrupt: Interrupt | None = None
    ) -> list[Key]:
        """The keys of what :meth:`list_tasks` would return, ``where.state`` aside."""
        ...

    def count_where(
        self, where: TaskFilter, up_to: int | None = None, interrupt: Interrupt | None = None
    ) -> int:
        """How many tasks match ``where``: exact (linear in the matches), or
        at most ``up_to`` (it reads no more matches than that)."""
        ...

    def timeline(
        self,
        where: TaskFilter,
        start_ms: int,
        bucket_ms: int,
        buckets: int,
        interrupt: Interrupt | None = None,
    ) -> Timeline:
        """Tasks due per routing key and bucket of time (``where``'s id prefix,
        routing key and tag apply; its due range and state do not). Routing
        keys with no task in the span are absent; more routing keys than a
        timeline may hold (domain/listing.py, timeline_of) raise TooCostly."""
        ...

    def earliest_due_ms(self) -> int | None:
        """The due time of the earliest-due task in the database (None: empty)."""
        ...

    def database_time_us(self) -> int:
        """The database server's clock, in microseconds since the Unix epoch."""
        ...

    def close(self) -> None: ...


class FiredSink(Protocol):
    """Where the scheduler hands due tasks: the publisher's send buffer."""

    def room(self) -> int: ...

    def put_many(self, tasks: Sequence[Task]) -> None: ...


class FiredSource(Protocol):
    """What the publisher takes fired tasks from: the send buffer. Called on
    the publisher's thread."""

    def __len__(self) -> int: ...

    def take(self, limit: int) -> list[Task]:
        """Up to ``limit`` tasks, oldest first, removed from the buffer: those
        the engine's lease check lets through (possibly none while more wait)."""
        ...

    def requeue_front(self, tasks: Sequence[Task]) -> None:
        """Put back tasks that must go out first (unconfirmed when a connection died)."""
        ...


class ConfirmSink(Protocol):
    """Where the publisher hands the ids of tasks the broker confirmed."""

    def confirmed(self, tasks: Sequence[Task]) -> None:
        """The broker confirmed these tasks' events (their rows may go: by revision)."""
        ...


# (task, delay_ms): an event the broker did not take; store it back, to be
# armed and fired again ``delay_ms`` from now. Called on the publisher's thread.
RetryHandler = Callable[[Task, int], None]


class EventPublisher(Protocol):
    """The publisher thread, as the engine drives it."""

    def start(self) -> None: ...

    def wake(self) -> None:
        """Thread-safe: there is something new in the send buffer."""
        ...

    def finish(self, deadline_s: float) -> None:
        """Publish what is buffered and wait for confirms until ``deadline_s``
        (``time.monotonic``), then stop."""
        ...

    def join(self, timeout_s: float | None = None) -> bool: ...

    def is_alive(self) -> bool: ...

    def stalled(self, now_s: float, max_silence_s: float) -> bool:
        """Its thread runs but made no progress for over ``max_silence_s``
        (``now_s``: ``time.monotonic()``): wedged (see ``Worker.stalled``)."""
        ...

    def is_connected(self) -> bool:
        """Connected to the broker with a channel ready to publish."""
        ...

    def unconfirmed(self) -> int: ...

    def counters(self) -> Mapping[str, int]:
        """Totals since start: published, confirmed, returned, nacked,
        dead_lettered, late_skipped, broker_reconnects."""
        ...

    def take_lateness(self) -> list[float]:
        """Publish time - due time (ms) of each event published since the last call."""
        ...


class DrivenTimer(Protocol):
    """A timed stage (the scheduler) whose waits another thread's loop can
    take over (:class:`TimerDriver`)."""

    def drive_from(self, wake: Callable[[], None]) -> None:
        """Before start: from now on ``tick`` is called by the driver's loop,
        and ``wake`` (thread-safe) asks it for a tick at once."""
        ...

    def tick(self, now_ms: float) -> float | None:
        """On the driver's thread: handle what is due by ``now_ms``; then
        seconds until the next tick is needed (None: until woken)."""
        ...


@runtime_checkable
class TimerDriver(Protocol):
    """A publisher whose I/O loop times the scheduler itself, so that a due
    task is published by the wake that fires it, with no hand-off between
    threads."""

    def drive(self, timer: DrivenTimer) -> None:
        """Before start: take over ``timer``'s waits."""
        ...


@dataclass(frozen=True, slots=True)
class EngineStats:
    """The engine's size gauges and totals, as the metrics collector reads them."""

    in_memory: int
    shards: int  # shard leases held
    armed: int  # armed copies waiting for their due time (the scheduler's heap)
    send_buffer: int
    unconfirmed: int
    members: int  # live instances on the database, as last counted
    fired: int
    deleted: int
    # Per rate-limit bucket, ``throttle_holding:<pattern>``: tasks held now.
    throttle_holding: Mapping[str, int] = field(default_factory=dict)


class MetricsSink(Protocol):
    """Where metrics points go (InfluxDB). Called from the metrics thread only."""

    def write(self, points: Sequence[Point]) -> None:
        """Write the points, or raise :class:`~triggerhook.errors.MetricsUnavailable`
        (the sink is down or slow: the reporter keeps them and tries again) or
        :class:`~triggerhook.errors.MetricsRejected` (the sink refused them for
        good, e.g. bad credentials or an unknown database: they are dropped)."""
        ...

    def close(self) -> None: ...
