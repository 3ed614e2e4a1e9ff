"""The seams between the engine and the outside world.

The engine and the library API depend only on these protocols; the MySQL and
AMQP adapters implement them, and unit tests use in-memory fakes. This module
sits below the engine and the adapters (it imports only domain/ and runtime/),
so they meet here without importing each other.

Errors: every method may raise :class:`~triggerhook.errors.StoreUnavailable`
(transient: the caller may retry) or :class:`~triggerhook.errors.StoreError`
(permanent). Nothing else escapes an adapter.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from triggerhook.domain.task import CancelResult, RescheduleResult, Task, TaskInfo
from triggerhook.runtime.points import Point


class Clock(Protocol):
    def now_ms(self) -> float:
        """Wall-clock time in (fractional) milliseconds since the Unix epoch:
        the database's, by a lower bound (see :class:`triggerhook.clock.DatabaseClock`)."""
        ...

    def bounded(self) -> bool:
        """Its error is within the configured bound: tasks may be fired by it."""
        ...


class ClaimMode(enum.Enum):
    """How a newly inserted row is held by the inserting instance."""

    NONE = 0  # left for any preloader
    CLAIM = 1  # claimed: goes straight into this instance's memory
    ARM = 2  # claimed and armed: due so soon that it is committed to fire


def new_rev() -> int:
    """A fresh row revision: random, so a row deleted and created again under
    the same id never has the revision an old in-memory copy carries."""
    return random.getrandbits(63)


@dataclass(frozen=True, slots=True)
class NewRow:
    task: Task
    claim: ClaimMode = ClaimMode.NONE
    rev: int = field(default_factory=new_rev)


@dataclass(frozen=True, slots=True)
class Move:
    """Reschedule the task ``task_id`` to ``due_ms``, held as ``claim`` with a new ``rev``."""

    task_id: str
    due_ms: int
    claim: ClaimMode = ClaimMode.NONE
    rev: int = field(default_factory=new_rev)


@dataclass(frozen=True, slots=True)
class Moved:
    """A reschedule's outcome; ``task`` is the task as now stored when it moved."""

    result: RescheduleResult
    task: Task | None = None


@dataclass(frozen=True, slots=True)
class Deferral:
    """Put back the armed row ``task_id`` (held at ``rev``) whose event the
    broker did not take: claimable again from ``not_before_ms``, at ``new_rev``."""

    task_id: str
    rev: int
    not_before_ms: int
    new_rev: int = field(default_factory=new_rev)


class InsertOutcome(enum.Enum):
    CREATED = "created"
    EXISTS = "exists"  # same id, same content: a safe retry, nothing written
    CONFLICT = "conflict"  # same id, different content: nothing written


@dataclass(frozen=True, slots=True)
class Claim:
    """A task held in memory by this instance, with the revision of its row."""

    task: Task
    rev: int
    armed: bool

    @property
    def due_ms(self) -> int:
        return self.task.due_ms


class TaskStore(Protocol):
    def insert(
        self, rows: Sequence[NewRow], instance: str, lease_until_ms: int, atomic: bool
    ) -> list[InsertOutcome]:
        """Insert rows in one transaction, reporting each row's outcome.

        With ``atomic`` any conflict rolls everything back and raises
        :class:`~triggerhook.errors.ConflictError`.
        """
        ...

    def claim(
        self,
        instance: str,
        now_ms: int,
        horizon_ms: int,
        arm_until_ms: int,
        lease_until_ms: int,
        limit: int,
    ) -> list[Claim]:
        """Claim up to ``limit`` claimable tasks due by ``horizon_ms``, earliest first.

        Rows due by ``arm_until_ms`` (and rows armed by an instance that died)
        come back armed.
        """
        ...

    def arm(self, instance: str, claims: Sequence[Claim]) -> list[Claim]:
        """Commit the given claims to firing; returns those whose rows are still
        ours at the same revision. The others were cancelled, re-created or
        taken over: drop them."""
        ...

    def delete_fired(self, fired: Sequence[tuple[str, int]]) -> int:
        """Delete the armed rows whose events the broker confirmed, given as
        (id, revision): a row of the id at another revision (a newer
        incarnation) stays."""
        ...

    def defer(self, instance: str, deferrals: Sequence[Deferral]) -> int:
        """Disarm and unclaim rows whose events were not delivered, counting a
        failed attempt each (see :class:`Deferral`); a row no longer ours at
        that revision is left alone. Returns how many rows were deferred."""
        ...

    def renew_claims(self, instance: str, ids: Sequence[str], lease_until_ms: int) -> int:
        """Extend the claims on ``ids`` that ``instance`` still holds."""
        ...

    def release_claims(self, instance: str, ids: Sequence[str] | None = None) -> int:
        """Give up claims (all of ``instance``'s, or just ``ids``) for others to take."""
        ...

    def cancel(self, task_ids: Sequence[str]) -> list[CancelResult]:
        """Cancel in one transaction; one result per id (an id given twice is
        cancelled once, then not found)."""
        ...

    def reschedule(self, moves: Sequence[Move], instance: str, lease_until_ms: int) -> list[Moved]:
        """Move unarmed tasks to new due times in one transaction (a new
        revision, so copies held in memory anywhere fail to arm); one outcome
        per move. An armed task is TOO_LATE; an id moved twice in one call takes
        the last move."""
        ...

    def check_schema(self) -> None:
        """Raise :class:`~triggerhook.errors.SchemaError` unless the schema is current."""
        ...

    def get(self, task_id: str) -> TaskInfo | None: ...

    def count_tasks(self) -> int:
        """Every task in the database (an exact, and so not free, COUNT)."""
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
        """Up to ``limit`` tasks, oldest first, removed from the buffer."""
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
# claimed and fired again ``delay_ms`` from now. Called on the publisher's thread.
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

    def is_connected(self) -> bool:
        """Connected to the broker with a channel ready to publish."""
        ...

    def unconfirmed(self) -> int: ...

    def counters(self) -> Mapping[str, int]:
        """Totals since start: published, confirmed, returned, nacked,
        dead_lettered, broker_reconnects."""
        ...

    def take_lateness(self) -> list[float]:
        """Publish time - due time (ms) of each event published since the last call."""
        ...


@dataclass(frozen=True, slots=True)
class EngineStats:
    """The engine's size gauges and totals, as the metrics collector reads them."""

    in_memory: int
    pending_arm: int
    armed: int
    send_buffer: int
    unconfirmed: int
    claimed: int
    fired: int
    deleted: int


class MetricsSink(Protocol):
    """Where metrics points go (InfluxDB). Called from the metrics thread only."""

    def write(self, points: Sequence[Point]) -> None:
        """Write the points, or raise :class:`~triggerhook.errors.MetricsUnavailable`
        (the sink is down or slow: the reporter keeps them and tries again) or
        :class:`~triggerhook.errors.MetricsRejected` (the sink refused them for
        good, e.g. bad credentials or an unknown database: they are dropped)."""
        ...

    def close(self) -> None: ...
