"""The seam between the store kernel and a database: the steps of a transaction.

:class:`~triggerhook.store.kernel.StoreKernel` holds every rule of
``docs/design/ownership.md`` that decides what a transaction writes (R3,
R3a, R5, R5s, R6, R7, R8); a backend (``store/mysql``, ``store/sqlite``)
only runs the steps below, each one or a few statements, and decides nothing
about a row. Rows cross the seam as :class:`~triggerhook.store.rows.TaskRow`
and :class:`~triggerhook.store.rows.ShardRow`, the tables' own columns.

A :class:`Tx` is one transaction (or, from :meth:`Tables.read`, a run of
unlocked reads); it is used by one thread, inside the ``with`` of the
context manager that made it. Errors are the store's (``triggerhook.errors``):
a backend translates its driver's exceptions before they cross the seam.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from triggerhook.domain.arming import Mark, ShardMarks
from triggerhook.domain.meta import Meta
from triggerhook.interfaces import NewRow
from triggerhook.store.arm_pass import PassReads
from triggerhook.store.rows import FiredRecord, OutboxEntry, ShardRow, TaskRow


class DuplicateRow(Exception):
    """:meth:`Tx.insert_rows` found an id that exists; it wrote nothing."""


@dataclass(frozen=True, slots=True)
class RowMove:
    """A row rewritten unarmed: its new fire time (and, but for a deferral,
    due time), revision, the generation it is written in; ``meta`` (a
    series' next occurrence) when it changes, else None; ``tagged``: its tag
    rows follow the new due time; ``postponed`` (a deferral only): a copy a
    rate limit held back (R8p), not a failed delivery, so ``attempts`` stays."""

    task_id: str
    fire_ms: int
    rev: int
    gen: int
    meta: Meta | None = None
    tagged: bool = False
    postponed: bool = False


class Tx(Protocol):
    """The steps of one transaction. "Lock" is a locking read where the
    database has row locks (MySQL) and a plain read under the write lock
    where it has one lock for the whole file (SQLite)."""

    def lock_shards(self, shards: Collection[int], exclusive: bool) -> dict[int, ShardRow]:
        """The shard rows, locked in shard order: ``exclusive`` for an arming
        pass (R3), else shared (R6-R8: they exclude a pass, not each other).
        A shard the table has not is missing from the answer."""
        ...

    def lock_rows(self, task_ids: Sequence[str]) -> dict[str, TaskRow]:
        """The task rows of these ids that exist, locked (any number of ids)."""
        ...

    def insert_rows(self, rows: Sequence[NewRow], gens: Mapping[int, int]) -> None:
        """R6: the rows, unarmed in generation ``gens[shard]``, and their tag
        rows. Raises :class:`DuplicateRow`, having written nothing, when an id
        exists."""
        ...

    def delete_rows(self, task_ids: Sequence[str]) -> None: ...

    def fired_live(self, task_ids: Sequence[str], now_ms: float) -> dict[str, int]:
        """R6's check after its insert: of these ids, those with a fired
        record expiring after ``now_ms``, each with its ``fired_ms``; read
        with a lock, so it sees every committed record (R5d)."""
        ...

    def record_fired(self, records: Sequence[FiredRecord]) -> None:
        """R5d: these records, each replacing an older one of its id."""
        ...

    def mark_dedup(self) -> None:
        """A task with a dedup window is being written: the fast insert path
        (:meth:`Tables.insert_fast`), which does not check records, ends for good."""
        ...

    def set_meta(self, changes: Sequence[tuple[str, Meta]]) -> None: ...

    def take_outbox(self, limit: int) -> list[OutboxEntry]:
        """R6o's first step: the oldest ``limit`` committed outbox rows, locked,
        skipping rows another transaction holds (the caller's, uncommitted,
        or another mover's)."""
        ...

    def delete_outbox(self, seqs: Sequence[int]) -> None:
        """R6o's last step: these outbox rows, in the transaction that moved them."""
        ...

    def move_rows(self, moves: Sequence[RowMove]) -> None:
        """Reschedule and a series' next occurrence: due and fire time,
        revision, generation (and meta when given); failed attempts start over."""
        ...

    def defer_rows(self, moves: Sequence[RowMove]) -> None:
        """R8: fire time, revision, generation; one more failed attempt (the
        due time the event says stays), none for a move ``postponed`` (R8p)."""
        ...

    def read_for_arming(
        self, held: Mapping[int, ShardMarks], horizon_ms: int, limit: int
    ) -> PassReads[TaskRow]:
        """Both reads of a pass over the ``held`` shards (store/arm_pass.py)."""
        ...

    def any_to_arm(self, held: Mapping[int, ShardMarks], bound_ms: int) -> bool:
        """Whether :meth:`read_for_arming` up to ``bound_ms`` would find a
        row (the skip probe: a statement cheaper than the reads)."""
        ...

    def any_due(self, shards: Collection[int], bound_ms: int) -> bool:
        """Whether any row of these shards, armed or not, has ``fire_ms <= bound_ms``."""
        ...

    def set_marks(self, marks: Mapping[int, ShardMarks]) -> None: ...

    def settle(self, task_ids: Sequence[str]) -> None:
        """The settle case of an arming plan: these rows armed by their own gen."""
        ...


class Tables(Protocol):
    """A backend's connection side: transactions, and the statements the
    kernel runs outside one."""

    def write(self) -> AbstractContextManager[Tx]:
        """One transaction: committed when the block ends, rolled back when it raises."""
        ...

    def read(self) -> AbstractContextManager[Tx]:
        """Unlocked reads, each a consistent snapshot of its own (no locks taken)."""
        ...

    def insert_fast(self, rows: Sequence[NewRow]) -> bool:
        """Optional fast path of R6: rows none of which exists, committed in
        one statement, without the check of fired records, so only while no
        task with a dedup window was ever written (:meth:`Tx.mark_dedup`).
        False (having written nothing): take the general path."""
        ...

    def cancel_unarmed(self, shards: Mapping[str, tuple[int, ...]]) -> bool:
        """Optional fast path of R7: every id exists and is unarmed: all
        deleted at once, under the locks of every candidate shard given
        (store/lanes.py). False (nothing written): the general path."""
        ...

    def delete_fired(self, fired: Sequence[tuple[str, int]]) -> int:
        """R5: the rows at exactly these (id, revision), each part committed
        by itself; the number deleted."""
        ...

    def outbox_waiting(self) -> tuple[int | None, int]:
        """The first outbox row's ``created_ms`` (None: none) and how many
        wait (up to 1,000,000), unlocked (committed rows only)."""
        ...

    def sweep_fired(self, shards: Sequence[int], now_ms: float, limit: int) -> int:
        """At most ``limit`` records of these shards expired by ``now_ms``
        deleted, in expiry order, committed; the number deleted."""
        ...

    def inherited(self, shard: int, after: Mark, took: ShardMarks, limit: int) -> list[TaskRow]:
        """The shard's rows armed before ``took`` was taken (``is_inherited``)
        with mark above ``after``, in mark order, at most ``limit``."""
        ...
