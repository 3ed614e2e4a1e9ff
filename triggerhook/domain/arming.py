"""Shards and arming, as pure rules (``docs/design/ownership.md``, R3, R6-R8).

Every task belongs to one shard (``shard_of``). A shard row carries the **arm
watermark** ``armed`` — a mark ``(fire_ms, id)`` — and the **arm generation**
``gen``; a task row carries the ``gen`` its shard had when the row was written.
A row is armed (committed to fire; cancel and reschedule are too late) exactly
when its mark is at or below the watermark *and* its gen is below the shard's
(:func:`is_armed`). Arming therefore writes one shard row, not each task row.

Both stores (MySQL and in memory) apply these functions, so the rule that
decides what a pass arms is written once.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

# (fire_ms, id): the order in which a shard's rows are armed.
Mark = tuple[int, str]

# Sorts after every task id ([A-Za-z0-9._:-], all below '~' in ASCII): a
# watermark (t, TOP_ID) covers every row with fire_ms <= t.
TOP_ID = "~"
# The watermark of a shard that never armed anything: below every row.
BOTTOM: Mark = (-(2**62), "")

R = TypeVar("R")


def shard_of(task_id: str, shard_count: int) -> int:
    """The shard of a task id: CRC-32 (as MySQL's ``CRC32()``) modulo the count."""
    return zlib.crc32(task_id.encode("ascii")) % shard_count


@dataclass(frozen=True, slots=True)
class Placement:
    """Which shard a task's row goes to (docs/design/flow-control.md, 3b).

    Lane 0 is shards ``0 .. N-1``: ``shard_of(id)``. Where the database has
    the rate-limited lane (``lanes == 2``: shards ``N .. 2N-1``), a task whose
    routing key ``limited`` names goes to ``shard_of(id) + N``, so that a
    limited key's backlog is armed apart from every other key's tasks. A row
    stays where it was written (only a replace moves it), so a write by id
    locks every candidate shard of the id: the row is in one of them."""

    shard_count: int
    lanes: int = 1
    limited: Callable[[str], bool] | None = None  # the writer's settings: rate_limits

    @property
    def total(self) -> int:
        """Shard rows in the database: N per lane."""
        return self.shard_count * self.lanes

    def shard(self, task_id: str, routing_key: str) -> int:
        """The shard a row of ``task_id`` with ``routing_key`` is written to."""
        home = shard_of(task_id, self.shard_count)
        if self.lanes > 1 and self.limited is not None and self.limited(routing_key):
            return home + self.shard_count
        return home

    def candidates(self, task_id: str) -> tuple[int, ...]:
        """Every shard a row of ``task_id`` may be in, in lock order."""
        home = shard_of(task_id, self.shard_count)
        return tuple(home + lane * self.shard_count for lane in range(self.lanes))

    def lane(self, shard: int) -> int:
        return shard // self.shard_count


@dataclass(frozen=True, slots=True)
class ShardMarks:
    """A shard row's arm state: the watermark and the generation."""

    armed: Mark
    gen: int


def is_armed(mark: Mark, row_gen: int, marks: ShardMarks) -> bool:
    """A row at ``mark`` written in ``row_gen`` is armed under ``marks``."""
    return mark <= marks.armed and row_gen < marks.gen


def is_inherited(mark: Mark, row_gen: int, took: ShardMarks) -> bool:
    """Armed before the current owner's epoch began (``took``: the marks at
    acquisition). Such a row is never unarmed again (R8): a stale owner of an
    earlier epoch may still hold a copy of it."""
    return is_armed(mark, row_gen, took)


@dataclass(frozen=True, slots=True)
class ArmPlan(Generic[R]):
    """What one arming pass of a shard does."""

    taken: list[R]  # the rows that become armed, in mark order
    marks: ShardMarks  # the shard's new marks (unchanged when ``settle``)
    # True, rarely: more rows were written below the watermark since the last
    # pass than there was room for, so a generation bump would arm some of them
    # unread. Instead the marks stay, and each taken row (all of them of the
    # current generation, below the watermark) is armed by writing its gen to
    # ``marks.gen - 1``: one row write per such row, never repeated.
    settle: bool = False


def arm_horizon(horizon_ms: int, marks: ShardMarks) -> int:
    """The horizon a pass reads to: never below the watermark (a clock
    estimate may step back a little; rows below the watermark written since
    the last pass must all be read before the generation moves on)."""
    return max(horizon_ms, marks.armed[0])


def plan_arming(
    marks: ShardMarks,
    horizon_ms: int,
    ranged: Sequence[R],
    fresh: Sequence[R],
    limit: int,
    mark: Callable[[R], Mark],
    *,
    ranged_cut: Mark | None = None,
    fresh_cut: Mark | None = None,
) -> ArmPlan[R] | None:
    """Plan one pass over one shard; None when there is nothing to arm.

    ``ranged``: rows with mark above the watermark and ``fire_ms <=
    arm_horizon(...)``, in mark order; ``fresh``: rows of generation
    ``marks.gen`` (written since the last pass) up to the same horizon, in
    mark order. A row may be in both. Each read is complete up to its last
    row; a read of ``limit`` rows or more is taken to be cut there (more may
    exist beyond it), and ``ranged_cut`` / ``fresh_cut`` say that a read was
    cut at that mark for another reason (a shared limit; ``ranged_cut =
    marks.armed`` with no ranged rows: the range was not read at all).

    Every row that the new marks arm is among the rows taken (at most
    ``limit``), and no other row changes state.
    """
    if limit <= 0:
        return None
    top = arm_horizon(horizon_ms, marks)
    cut = _cut(ranged, limit, mark, ranged_cut)
    fresh_end = _cut(fresh, limit, mark, fresh_cut)
    if fresh_end is not None:
        cut = fresh_end if cut is None else min(cut, fresh_end)
    merged: dict[Mark, R] = {}
    for row in (*ranged, *fresh):
        key = mark(row)
        if cut is None or key <= cut:
            merged[key] = row
    if not merged:
        return None
    order = sorted(merged)
    taken_keys = order[:limit]
    taken = [merged[key] for key in taken_keys]
    if cut is None and len(order) <= limit:  # read to the horizon, all taken
        return ArmPlan(taken, ShardMarks(max(marks.armed, (top, TOP_ID)), marks.gen + 1))
    last = taken_keys[-1]
    # Fresh rows in (last, watermark] may be left unread or untaken: a bump
    # would arm them. Every taken row then lies below the watermark and is of
    # the current generation (ranged rows lie above it).
    if last < marks.armed and (fresh_end is not None or len(order) > len(taken_keys)):
        return ArmPlan(taken, marks, settle=True)
    return ArmPlan(taken, ShardMarks(max(marks.armed, last), marks.gen + 1))


def _cut(
    rows: Sequence[R], limit: int, mark: Callable[[R], Mark], given: Mark | None
) -> Mark | None:
    """Where a read may have stopped short: the given cut, or its last row
    when it returned ``limit`` rows (None: complete to the horizon)."""
    cut = given
    if len(rows) >= limit:
        last = mark(rows[-1])
        cut = last if cut is None else min(cut, last)
    return cut
