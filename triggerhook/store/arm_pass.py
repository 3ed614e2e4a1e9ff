"""One arming pass over several shards (R3), as both stores run it.

Per shard the rule is :func:`~triggerhook.domain.arming.plan_arming`; what is
decided here, once for both stores, is how the two reads of a pass are made
and how its ``limit`` is shared. Each read covers every shard of the pass at
once, in (shard, mark) order, and returns at most ``limit + 1`` rows (in
MySQL: one statement holding both, each part an index range scan):

* **ranged**: per shard, the rows with mark above its watermark and
  ``fire_ms <=`` :func:`~triggerhook.domain.arming.arm_horizon`;
* **fresh**: per shard, the rows of its current generation at or below its
  watermark. (Such rows above it are in the ranged read whenever a plan
  could take them: a plan takes nothing beyond the cut of the ranged read,
  which holds every row above the watermark up to that cut. So they are not
  read twice, and for ``plan_arming`` the restricted read is a valid
  ``fresh``: complete up to its own cut.)

A read that returned more than ``limit`` rows was cut: the rows beyond the
``limit``-th are dropped, and the shards after the last row kept were not
read by it (:class:`Frontier`). The plans then take, in shard order, what
the limit leaves. A shard whose read was cut is planned with that cut
(``ranged_cut`` / ``fresh_cut``), so nothing unread is ever armed: at worst a
shard arms nothing in this pass and the next pass, at once, goes on.

Ordering by shard means that, in a backlog of more due rows than one pass
holds, the lower shards are armed first; passes then follow each other
without waiting until the backlog is armed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from triggerhook.domain.arming import ArmPlan, Mark, ShardMarks, plan_arming
from triggerhook.interfaces import Lease

R = TypeVar("R")

# A cut below every row: a read that never reached the shard.
NOTHING: Mark = (-(2**63), "")


@dataclass(frozen=True, slots=True)
class Frontier:
    """Where a cut read stopped: every row before (shard, mark) was read,
    none after. ``mark`` None: not even the shard's first row."""

    shard: int
    mark: Mark | None

    def cut(self, shard: int, beyond: Mark) -> Mark | None:
        """The read's cut for ``shard`` (None: complete to the horizon);
        ``beyond``: the cut of a shard the read did not reach."""
        if shard < self.shard:
            return None
        if shard == self.shard and self.mark is not None:
            return self.mark
        return beyond


@dataclass(frozen=True, slots=True)
class PassReads(Generic[R]):
    """The two reads of a pass, per shard in mark order, and where each was
    cut (None: complete)."""

    ranged: dict[int, list[R]]
    fresh: dict[int, list[R]]
    ranged_frontier: Frontier | None = None
    fresh_frontier: Frontier | None = None


def split_read(
    rows: Sequence[R], limit: int, shard_of: Callable[[R], int], mark: Callable[[R], Mark]
) -> tuple[dict[int, list[R]], Frontier | None]:
    """A read of up to ``limit + 1`` rows in (shard, mark) order, per shard,
    and its frontier when it was cut."""
    kept = rows[:limit]
    per_shard: dict[int, list[R]] = {}
    for row in kept:
        per_shard.setdefault(shard_of(row), []).append(row)
    if len(rows) <= limit:
        return per_shard, None
    stop = shard_of(rows[limit])
    last = per_shard.get(stop)
    return per_shard, Frontier(stop, mark(last[-1]) if last else None)


@dataclass(slots=True)
class PassResult(Generic[R]):
    """A whole pass: the rows taken per shard (in mark order), the new marks
    of the shards whose marks changed, and the taken rows to settle (armed by
    their own gen: see :class:`~triggerhook.domain.arming.ArmPlan`)."""

    taken: dict[int, list[R]] = field(default_factory=dict)
    marks: dict[int, ShardMarks] = field(default_factory=dict)
    settle: list[R] = field(default_factory=list)

    def __len__(self) -> int:
        return sum(len(rows) for rows in self.taken.values())


def plan_pass(
    held: dict[int, ShardMarks],
    reads: PassReads[R],
    horizon_ms: int,
    limit: int,
    mark: Callable[[R], Mark],
) -> PassResult[R]:
    """The plans of the ``held`` shards (shard → marks), in shard order,
    taking together at most ``limit`` rows."""
    result: PassResult[R] = PassResult()
    left = limit
    for shard in sorted(held):
        if left <= 0:
            break
        marks = held[shard]
        plan = plan_arming(
            marks,
            horizon_ms,
            reads.ranged.get(shard, []),
            reads.fresh.get(shard, []),
            left,
            mark,
            ranged_cut=_cut(reads.ranged_frontier, shard, marks.armed),
            fresh_cut=_cut(reads.fresh_frontier, shard, NOTHING),
        )
        if plan is None:
            continue
        _add(result, shard, marks, plan)
        left -= len(plan.taken)
    return result


def _cut(frontier: Frontier | None, shard: int, beyond: Mark) -> Mark | None:
    return None if frontier is None else frontier.cut(shard, beyond)


def _add(result: PassResult[R], shard: int, old: ShardMarks, plan: ArmPlan[R]) -> None:
    result.taken[shard] = plan.taken
    if plan.settle:
        result.settle.extend(plan.taken)
    if plan.marks != old:
        result.marks[shard] = plan.marks


def held_only(
    unanswered: Mapping[Lease, frozenset[str]] | None,
    held: dict[int, ShardMarks],
    epochs: Mapping[int, int],
) -> dict[Lease, frozenset[str]]:
    """R3a's ids of the leases a pass found still held at their epoch (a
    shard lost since is its next owner's: R2 inherits its armed rows)."""
    return {
        lease: ids
        for lease, ids in (unanswered or {}).items()
        if lease.shard in held and epochs.get(lease.shard) == lease.epoch
    }


def merge_taken(
    first: dict[int, list[R]], then: dict[int, list[R]], mark: Callable[[R], Mark]
) -> dict[int, list[R]]:
    """A pass's rows per shard in shard order, each shard's in mark order:
    ``first`` (R3a's, armed by a pass whose answer was lost) with ``then``
    (this pass's). They never share a row: R3a's are armed, a read's are not."""
    out: dict[int, list[R]] = {}
    for shard in sorted(first.keys() | then.keys()):
        rows = first.get(shard, []) + then.get(shard, [])
        out[shard] = sorted(rows, key=mark) if shard in first and shard in then else rows
    return out
