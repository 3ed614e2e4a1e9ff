"""What a series' pause or resume writes, per locked row (pure: the store
kernel runs it in its transaction; the rules are domain/series.py's)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from triggerhook.domain.meta import Meta
from triggerhook.domain.series import PARKED_MS, after_resume, copy_of, paused_meta, resumed_meta
from triggerhook.domain.task import SeriesResult, Task
from triggerhook.interfaces import new_rev
from triggerhook.store.rows import ShardRow, TaskRow, is_armed_row, meta_of
from triggerhook.store.tables import RowMove


@dataclass
class SeriesChange:
    """The writes of one part of a pause or resume, and its answers."""

    results: dict[str, SeriesResult] = field(default_factory=dict)
    marks: list[tuple[str, Meta]] = field(default_factory=list)  # meta only (armed rows)
    moves: list[RowMove] = field(default_factory=list)  # unarmed rows, new revisions
    ended: list[str] = field(default_factory=list)  # resumed with no occurrence left
    missed: list[tuple[TaskRow, int]] = field(default_factory=list)  # copies to write

    def copies(self, content: Callable[[TaskRow], Task]) -> list[Task]:
        return [copy_of(content(row), due_ms) for row, due_ms in self.missed]


def series_change(
    rows: Mapping[str, TaskRow], locked: dict[int, ShardRow], now_ms: float | None
) -> SeriesChange:
    """Pause (``now_ms`` None) or resume at ``now_ms`` each of the locked
    ``rows``. Pause: an armed row only marked paused (its occurrence fires;
    R5s parks the next), else parked at PARKED_MS. Resume: a row marked
    while armed only unmarked; a parked one moved to its next occurrence
    (domain/series.after_resume), with copies of the missed ones under
    catch-up "all", or deleted when none is left. Answers for a paused series
    paused again, or one not paused resumed, write nothing."""
    change = SeriesChange()
    for tid, row in rows.items():
        meta = meta_of(row.meta, tid)
        recur = meta.recur
        if recur is None:
            change.results[tid] = SeriesResult.NOT_A_SERIES
        elif now_ms is None:
            change.results[tid] = _pause(change, row, meta, locked)
        elif not recur.paused:
            change.results[tid] = SeriesResult.RESUMED
        elif recur.resume_ms is None or is_armed_row(row, locked):
            change.marks.append((tid, resumed_meta(meta)))  # its occurrence fires; R5s goes on
            change.results[tid] = SeriesResult.RESUMED
        else:
            change.results[tid] = _resume(change, row, meta, locked[row.shard].arm_gen, now_ms)
    return change


def parked_move(row: TaskRow, due_ms: int) -> Meta | None:
    """A reschedule of a parked (paused) series moves the occurrence it
    resumes at, and it stays paused: its metadata so (None: not parked)."""
    meta = meta_of(row.meta, row.id)
    if meta.recur is None or not meta.recur.paused or meta.recur.resume_ms is None:
        return None
    return paused_meta(meta, due_ms)


def _pause(
    change: SeriesChange, row: TaskRow, meta: Meta, locked: dict[int, ShardRow]
) -> SeriesResult:
    assert meta.recur is not None
    if meta.recur.paused:
        return SeriesResult.PAUSED
    if is_armed_row(row, locked):
        change.marks.append((row.id, paused_meta(meta, None)))
        return SeriesResult.PAUSED_AFTER_THIS
    parked = paused_meta(meta, row.due_ms)
    gen = locked[row.shard].arm_gen  # R6: the shard's generation, read under its lock
    change.moves.append(RowMove(row.id, PARKED_MS, new_rev(), gen, parked, bool(meta.tags)))
    return SeriesResult.PAUSED


def _resume(
    change: SeriesChange, row: TaskRow, meta: Meta, gen: int, now_ms: float
) -> SeriesResult:
    upcoming = after_resume(meta, now_ms)
    change.missed.extend((row, due_ms) for due_ms in upcoming.missed_ms)
    if upcoming.due_ms is None:
        change.ended.append(row.id)
        return SeriesResult.ENDED
    tagged = bool(upcoming.meta.tags)
    change.moves.append(RowMove(row.id, upcoming.due_ms, new_rev(), gen, upcoming.meta, tagged))
    return SeriesResult.RESUMED
