"""The tables' rows and the pure functions over them: what each row means,
per row (store/kernel.py orders these decisions into transactions; the
backends in store/mysql and store/sqlite read and write the rows)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec

from triggerhook.domain.arming import Mark, Placement, ShardMarks, is_armed, is_inherited
from triggerhook.domain.meta import NO_META, Meta, from_record, stopping
from triggerhook.domain.series import after_fire
from triggerhook.domain.task import (
    CancelResult,
    InsertOutcome,
    OnConflict,
    Task,
    TaskInfo,
    TaskState,
)
from triggerhook.errors import (
    AlreadyFiredError,
    ConflictError,
    StoreError,
    TooLateError,
    ValidationError,
)
from triggerhook.interfaces import DeferOutcome, Deferral, Inserted, NewRow

log = logging.getLogger(__name__)

# One INSERT statement carries at most this many rows or payload bytes; escaped
# binary at most doubles, which stays under MAX_STATEMENT_BYTES.
INSERT_CHUNK_ROWS = 2000
INSERT_CHUNK_BYTES = 4 * 1024 * 1024

Row = tuple[Any, ...]


class TaskRow(NamedTuple):
    """A th_tasks row as each backend's TASK_COLUMNS reads it."""

    id: str
    due_ms: int
    routing_key: str | None
    payload: bytes | None
    rev: int
    attempts: int
    shard: int
    fire_ms: int
    gen: int
    meta: bytes | None

    @property
    def mark(self) -> Mark:
        return (self.fire_ms, self.id)


class ShardRow(NamedTuple):
    """A th_shards row as each backend's SHARD_COLUMNS reads it."""

    shard: int
    owner: str | None
    epoch: int
    armed_ms: int
    armed_id: str
    arm_gen: int
    took_ms: int
    took_id: str
    took_gen: int
    lease_until_ms: int

    @property
    def marks(self) -> ShardMarks:
        return ShardMarks((self.armed_ms, self.armed_id), self.arm_gen)

    @property
    def took(self) -> ShardMarks:
        return ShardMarks((self.took_ms, self.took_id), self.took_gen)

    def held_by(self, instance: str, epoch: int) -> bool:
        return self.owner == instance and self.epoch == epoch


def row_mark(row: TaskRow) -> Mark:
    """A row's mark (the arming order's key: for ``split_read``/``plan_pass``)."""
    return row.mark


def row_shard(row: TaskRow) -> int:
    return row.shard


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def meta_blob(meta: Meta) -> bytes | None:
    """th_tasks.meta of a task: JSON, NULL when it has none."""
    return msgspec.json.encode(meta.to_record()) if meta else None


def meta_of(blob: bytes | None, task_id: str) -> Meta:
    """The metadata th_tasks.meta holds. A value no release wrote (edited by
    hand) is logged and read as none, so that the task still fires."""
    if blob is None:
        return NO_META
    try:
        record = msgspec.json.decode(blob)
        if not isinstance(record, dict):
            raise ValidationError("meta", "is not a JSON object")
        return from_record(record)
    except (msgspec.DecodeError, ValidationError) as exc:
        log.error("task %r has unreadable metadata, read as none: %s", task_id, exc)
        return NO_META


def insert_params(
    row: NewRow, placement: Placement, gens: Mapping[int, int], default_key: str
) -> Row:
    task = row.task
    shard = placement.shard(task.id, task.routing_key or default_key)
    if shard not in gens:
        raise StoreError(f"the database has no row for shard {shard}: run `triggerhook db init`")
    return (
        task.id,
        shard,
        row.rev,
        gens[shard],
        task.due_ms,
        task.due_ms,
        task.routing_key or default_key,
        task.payload or None,
        meta_blob(task.meta),
    )


def tag_rows(tasks: Sequence[Task]) -> list[tuple[str, int, str]]:
    """The th_task_tags rows (tag, due_ms, id) of these tasks."""
    return [(tag, task.due_ms, task.id) for task in tasks for tag in task.meta.tags]


def content_of(row: Row, default_key: str) -> Task:
    """A task as ``get`` and the duplicate check compare it (no attempts,
    revision), from the columns (id, due_ms, routing_key, payload, meta), the
    first five of each backend's TASK_STATE_COLUMNS: a NULL routing key read
    back as ``default_key``."""
    task_id, due_ms, routing_key, payload, meta = row[:5]
    key = routing_key or default_key
    return Task(task_id, due_ms, key, bytes(payload or b""), meta=meta_of(meta, task_id))


def info_of(row: Row, default_key: str) -> TaskInfo:
    """A task and its state from a row of each backend's TASK_STATE_COLUMNS
    (the content, then fire_ms, gen, the shard's armed_ms, armed_id and
    arm_gen, then throttled): FIRING when armed; ``throttled`` while a rate
    limit's postponement (R8p) leaves it waiting unarmed; its ``fire_ms`` when
    later than its due time."""
    fire_ms, gen, marks = row[5], row[6], ShardMarks((row[7], row[8]), row[9])
    armed = is_armed((fire_ms, row[0]), gen, marks)
    return TaskInfo(
        content_of(row, default_key),
        TaskState.FIRING if armed else TaskState.SCHEDULED,
        throttled=bool(row[10]) and not armed,
        fire_ms=int(fire_ms) if fire_ms > row[1] else None,
    )


def task_of(row: TaskRow, epoch: int, default_key: str) -> Task:
    """A row as armed: its content, attempts, revision, shard, fire time and
    the epoch of the lease it was armed under."""
    # Unpacked, not read field by field: one per row armed (timeit: 183 ns
    # against 327, with the metadata's NULL tested here).
    task_id, due_ms, key, payload, rev, attempts, shard, fire_ms, _gen, meta = row
    return Task(
        task_id,
        due_ms,
        key or default_key,
        bytes(payload) if payload else b"",
        attempts,
        rev,
        shard,
        epoch,
        fire_ms,
        NO_META if meta is None else meta_of(meta, task_id),
    )


def is_armed_row(row: TaskRow, locked: dict[int, ShardRow]) -> bool:
    shard = locked.get(row.shard)
    if shard is None:
        raise StoreError(f"the database has no row for shard {row.shard}: run `db init`")
    return is_armed(row.mark, row.gen, shard.marks)


def defer_outcome(
    instance: str, deferral: Deferral, shard: ShardRow | None, row: TaskRow | None
) -> DeferOutcome:
    """R8 for one deferral, under the locks of its shard row and task row."""
    task = deferral.task
    if shard is None or not shard.held_by(instance, task.epoch):
        return DeferOutcome.GONE  # fenced: the lease is no longer ours
    if row is None or row.rev != task.rev or row.shard != task.shard:
        return DeferOutcome.GONE  # cancelled, fired, or another incarnation
    if is_inherited(row.mark, row.gen, shard.took):
        return DeferOutcome.INHERITED  # never unarmed: a stale owner may hold a copy
    return DeferOutcome.DEFERRED


def cancel_result(armed: bool | None) -> CancelResult:
    if armed is None:
        return CancelResult.NOT_FOUND
    return CancelResult.TOO_LATE if armed else CancelResult.CANCELLED


def first_wins(task_ids: Sequence[str], results: dict[str, CancelResult]) -> list[CancelResult]:
    """One result per id asked; an id asked twice is cancelled once, then not found."""
    out = []
    seen: set[str] = set()
    for tid in task_ids:
        result = results[tid]
        if tid in seen and result is CancelResult.CANCELLED:
            result = CancelResult.NOT_FOUND
        seen.add(tid)
        out.append(result)
    return out


def id_rounds(rows: Sequence[NewRow]) -> list[list[int]]:
    """Row indexes in rounds: each id's first row, then each id's second, and
    so on, so that a later row of an id comes after what the earlier wrote."""
    seen: dict[str, int] = {}
    rounds: list[list[int]] = []
    for index, row in enumerate(rows):
        nth = seen.get(row.task.id, 0)
        seen[row.task.id] = nth + 1
        if nth == len(rounds):
            rounds.append([])
        rounds[nth].append(index)
    return rounds


def conflict_outcome(row: NewRow, stored: Task, armed: bool) -> InsertOutcome:
    """A create of an id that exists, by its ``on_conflict`` (R6, R6r): the
    same content is a safe retry; else a conflict, the stored task kept, or
    replaced when it is not armed (being published: too late)."""
    if row.task == stored:
        return InsertOutcome.EXISTS
    if row.on_conflict is OnConflict.KEEP:
        return InsertOutcome.KEPT
    if row.on_conflict is OnConflict.REPLACE:
        return InsertOutcome.TOO_LATE if armed else InsertOutcome.REPLACED
    return InsertOutcome.CONFLICT


@dataclass(frozen=True, slots=True)
class FiredRecord:
    """A th_fired row (R5d): ``task_id`` at ``rev`` fired at ``fired_ms``; a
    create of the id is ALREADY_FIRED until ``expires_ms``."""

    task_id: str
    shard: int
    rev: int
    fired_ms: int
    expires_ms: int


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """A th_outbox row (R6o): its ``seq``, and the row to insert (None: one
    no release wrote, logged; the move deletes it with the others)."""

    seq: int
    row: NewRow | None


def outbox_entry(columns: Row) -> OutboxEntry:
    """An outbox row from its columns (seq, then the OUTBOX_COLUMNS)."""
    seq, task_id, rev, due_ms, key, payload, meta, rule, _created_ms = columns
    try:
        on_conflict = OnConflict(rule)
    except ValueError:
        log.error("outbox row %d (task %r) has on_conflict %r: deleted unmoved", seq, task_id, rule)
        return OutboxEntry(int(seq), None)
    task = Task(
        str(task_id), int(due_ms), key or "", bytes(payload or b""), meta=meta_of(meta, task_id)
    )
    return OutboxEntry(int(seq), NewRow(task, rev=int(rev), on_conflict=on_conflict))


def fired_rows(
    rows: Mapping[str, TaskRow], fired: Sequence[Task], now_ms: float
) -> tuple[list[str], list[FiredRecord]]:
    """R5d: of the confirmed tasks, the ids whose rows are still at the
    revision that fired (the transaction deletes them), and the records of
    those with a dedup window (the window the task fired with: its row's at
    that revision), fired at ``now_ms``."""
    fired_ms = int(now_ms)
    gone: dict[str, None] = {}  # ordered, and a set: an id confirmed twice goes once
    records: list[FiredRecord] = []
    for task in fired:
        row = rows.get(task.id)
        if row is None or row.rev != task.rev or task.id in gone:
            continue
        gone[task.id] = None
        window_ms = task.meta.dedup_window_ms
        if window_ms > 0:
            records.append(FiredRecord(task.id, row.shard, row.rev, fired_ms, fired_ms + window_ms))
    return list(gone), records


def refused(answers: Sequence[Inserted], fired_ok: bool = False) -> None:
    """An atomic insert's check: the first CONFLICT, TOO_LATE or (unless
    ``fired_ok``) ALREADY_FIRED raises (the transaction rolls back), naming
    its index."""
    for index, answer in enumerate(answers):
        if answer.outcome is InsertOutcome.CONFLICT:
            raise ConflictError(answer.task.id, index)
        if answer.outcome is InsertOutcome.TOO_LATE:
            raise TooLateError(answer.task.id, index)
        if answer.outcome is InsertOutcome.ALREADY_FIRED and not fired_ok:
            raise AlreadyFiredError(answer.task.id, answer.fired_ms or 0, index)


def insert_chunks(rows: Sequence[NewRow], indexes: list[int]) -> Iterator[list[int]]:
    """Split row indexes into chunks bounded in rows and payload bytes."""
    chunk: list[int] = []
    size = 0
    for row, index in zip(rows, indexes, strict=True):
        if chunk and (
            len(chunk) >= INSERT_CHUNK_ROWS or size + len(row.task.payload) > INSERT_CHUNK_BYTES
        ):
            yield chunk
            chunk, size = [], 0
        chunk.append(index)
        size += len(row.task.payload)
    if chunk:
        yield chunk


@dataclass(frozen=True, slots=True)
class Step:
    """What R5s does to one series row: rewrite it to the occurrence due at
    ``due_ms`` with ``meta`` (its next occurrence number), or (``due_ms`` None)
    delete it: the series ended."""

    row: TaskRow
    due_ms: int | None
    meta: Meta
    missed_ms: tuple[int, ...] = ()  # catch_up "all": copies of these occurrences


def next_step(
    row: TaskRow | None, fired: Mapping[tuple[str, int], Task], now_ms: float
) -> Step | None:
    """R5s for a row whose occurrence was confirmed, from the locked row and
    the confirmed copies by (id, revision); None: no copy of the row's
    revision was confirmed (advanced already, cancelled, another
    incarnation, or only a stale revision's copy fired), nothing to do. The
    stored row's schedule counts (a cancel may have stopped it since the
    copy was armed)."""
    if row is None or (row.id, row.rev) not in fired:
        return None
    meta = meta_of(row.meta, row.id)
    upcoming = after_fire(meta, row.due_ms, now_ms)
    if upcoming is None:  # not a series (any longer): the row goes
        return Step(row, None, meta)
    return Step(row, upcoming.due_ms, upcoming.meta, upcoming.missed_ms)


def stopped_series(rows: Sequence[TaskRow]) -> list[tuple[str, Meta]]:
    """Of rows too late to cancel (armed), the series not yet stopped, with
    their metadata marked stopped: the occurrence being published is their last."""
    marked = ((row.id, stopping(meta_of(row.meta, row.id))) for row in rows)
    return [(tid, meta) for tid, meta in marked if meta is not None]
