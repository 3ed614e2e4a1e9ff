"""The arming rules of ``triggerhook/domain/arming.py`` (``docs/design/ownership.md``,
State, R3, R6-R8): examples of :func:`plan_arming`, and a property test that
models one shard's table as a store would run it — inserts, cancels and
reschedules (R6, R7), arming passes with their settle case, and the delete after
confirm (R5) — and checks after every step that no row becomes armed unread,
nothing taken is unarmed again, nothing is taken twice, and every row is
eventually taken.

Fixed example budget and no example database: the module runs in a few seconds.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triggerhook.domain.arming import (
    BOTTOM,
    TOP_ID,
    ArmPlan,
    Mark,
    ShardMarks,
    arm_horizon,
    is_armed,
    is_inherited,
    plan_arming,
    shard_of,
)

BUDGET = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# A cut below every row: a read cut before its first row.
NOTHING: Mark = (-(2**63), "")


def same(row: Mark) -> Mark:
    """Rows in the examples are their marks."""
    return row


def plan(
    marks: ShardMarks,
    horizon_ms: int,
    ranged: list[Mark],
    fresh: list[Mark],
    limit: int,
) -> ArmPlan[Mark] | None:
    return plan_arming(marks, horizon_ms, ranged, fresh, limit, same)


# --- examples ---------------------------------------------------------------


def test_nothing_to_arm_gives_none() -> None:
    marks = ShardMarks((10, "a"), 3)
    assert plan(marks, 100, [], [], 5) is None
    assert plan(ShardMarks(BOTTOM, 0), 100, [], [], 1) is None


def test_no_room_gives_none() -> None:
    marks = ShardMarks((10, "a"), 3)
    assert plan(marks, 100, [(20, "b")], [(5, "p")], 0) is None
    assert plan(marks, 100, [(20, "b")], [(5, "p")], -1) is None


def test_a_complete_read_moves_the_watermark_to_the_horizon() -> None:
    marks = ShardMarks((10, "a"), 3)
    result = plan(marks, 100, [(20, "b"), (30, "c")], [], 5)
    assert result == ArmPlan([(20, "b"), (30, "c")], ShardMarks((100, TOP_ID), 4))


def test_a_complete_read_from_bottom() -> None:
    result = plan(ShardMarks(BOTTOM, 0), 7, [(3, "x")], [(3, "x")], 1000)
    assert result == ArmPlan([(3, "x")], ShardMarks((7, TOP_ID), 1))


def test_the_limit_hit_in_the_ranged_read_stops_the_watermark_at_the_last_row() -> None:
    marks = ShardMarks((10, "a"), 3)
    result = plan(marks, 100, [(20, "b"), (30, "c")], [], 2)
    assert result == ArmPlan([(20, "b"), (30, "c")], ShardMarks((30, "c"), 4))


def test_a_fresh_row_above_the_cut_is_left_for_later() -> None:
    # The ranged read is full; the fresh row (35, y) lies above its last row,
    # so rows between (30, c) and (35, y) may exist unread: y is not taken and
    # stays above the new watermark (unarmed).
    marks = ShardMarks((10, "a"), 3)
    result = plan(marks, 100, [(20, "b"), (30, "c")], [(35, "y")], 2)
    assert result == ArmPlan([(20, "b"), (30, "c")], ShardMarks((30, "c"), 4))
    assert not is_armed((35, "y"), 3, result.marks)


def test_a_fresh_row_below_the_watermark_is_taken() -> None:
    # Written since the last pass with fire_ms in the past (R6): gen == marks.gen.
    marks = ShardMarks((50, "m"), 3)
    assert not is_armed((5, "p"), 3, marks)
    result = plan(marks, 60, [], [(5, "p")], 5)
    assert result == ArmPlan([(5, "p")], ShardMarks((60, TOP_ID), 4))
    assert is_armed((5, "p"), 3, result.marks)


def test_the_limit_hit_in_fresh_rows_below_the_watermark_settles_the_taken_rows() -> None:
    # More rows may be fresh below the watermark than were read: the marks
    # stay (a bump would arm those unread), the taken rows are settled.
    marks = ShardMarks((50, "m"), 3)
    result = plan(marks, 60, [], [(5, "p"), (6, "q")], 2)
    assert result == ArmPlan([(5, "p"), (6, "q")], marks, settle=True)


def test_settle_when_both_reads_are_full() -> None:
    # Both reads hit the limit of 1: the cut is the lower of their last rows.
    marks = ShardMarks((10, "a"), 3)
    result = plan(marks, 100, [(20, "b")], [(5, "p")], 1)
    assert result == ArmPlan([(5, "p")], marks, settle=True)


def test_more_rows_than_room_though_neither_read_is_full() -> None:
    marks = ShardMarks((10, "a"), 3)
    result = plan(marks, 100, [(20, "b"), (30, "c")], [(5, "p"), (6, "q")], 3)
    assert result == ArmPlan([(5, "p"), (6, "q"), (20, "b")], ShardMarks((20, "b"), 4))


def test_a_row_in_both_reads_is_taken_once() -> None:
    marks = ShardMarks((10, "a"), 3)
    result = plan(marks, 100, [(20, "b"), (30, "c")], [(20, "b")], 5)
    assert result is not None
    assert result.taken == [(20, "b"), (30, "c")]
    assert result.marks == ShardMarks((100, TOP_ID), 4)


def test_the_horizon_never_moves_below_the_watermark() -> None:
    marks = ShardMarks((50, "m"), 3)
    assert arm_horizon(40, marks) == 50
    assert arm_horizon(50, marks) == 50
    assert arm_horizon(60, marks) == 60
    assert arm_horizon(-(2**63), ShardMarks(BOTTOM, 0)) == BOTTOM[0]
    # A clock estimate that stepped back: the pass still reads to the watermark
    # and the watermark does not move back.
    result = plan(marks, 40, [(50, "z")], [(45, "p")], 5)
    assert result == ArmPlan([(45, "p"), (50, "z")], ShardMarks((50, TOP_ID), 4))
    assert plan(marks, 40, [], [(45, "p")], 5) == ArmPlan([(45, "p")], ShardMarks((50, TOP_ID), 4))


def test_a_watermark_at_top_id_stays() -> None:
    marks = ShardMarks((50, TOP_ID), 3)
    result = plan(marks, 20, [], [(45, "p")], 5)
    assert result == ArmPlan([(45, "p")], ShardMarks((50, TOP_ID), 4))


def test_top_and_bottom_bound_every_id() -> None:
    alphabet = "ABCXYZabcxyz0189._:-"
    assert all(c < TOP_ID for c in alphabet)
    assert BOTTOM < (-(2**61), "")
    assert (5, "zz-99") < (5, TOP_ID) < (6, "")


def test_is_armed_needs_both_the_watermark_and_an_older_generation() -> None:
    marks = ShardMarks((50, "m"), 3)
    assert is_armed((50, "m"), 2, marks)
    assert is_armed((10, "z"), 0, marks)
    assert not is_armed((50, "n"), 2, marks)  # above the watermark
    assert not is_armed((10, "a"), 3, marks)  # written since the last pass
    assert is_inherited((10, "a"), 2, marks)
    assert not is_inherited((10, "a"), 3, marks)
    assert not is_inherited((51, "a"), 2, marks)


@pytest.mark.parametrize("count", [1, 2, 7, 64, 1000])
def test_shard_of_is_crc32_modulo_the_count(count: int) -> None:
    ids = ["a", "task-1", "x.y:z", "Z9", "0", "order:12345", "a" * 200]
    for task_id in ids:
        shard = shard_of(task_id, count)
        assert shard == zlib.crc32(task_id.encode("ascii")) % count
        assert 0 <= shard < count
        assert shard_of(task_id, count) == shard  # stable


def test_shard_of_known_values() -> None:
    # As MySQL's CRC32('abc') = 891568578.
    assert shard_of("abc", 2**32) == 891568578
    assert shard_of("abc", 64) == 891568578 % 64
    assert shard_of("abc", 1) == 0


# --- the model of one shard -------------------------------------------------

IDS = ("a", "b", "c.1", "c:2", "d-3", "Z", "0", "x.y", "7", "k")


@dataclass
class Row:
    fire_ms: int
    gen: int
    incarnation: int


@dataclass
class Shard:
    """One shard's table and shard row, and what the owner holds in memory."""

    marks: ShardMarks = field(default_factory=lambda: ShardMarks(BOTTOM, 0))
    rows: dict[str, Row] = field(default_factory=dict)
    memory: set[tuple[str, int]] = field(default_factory=set)  # (id, incarnation)
    taken_ever: set[tuple[str, int]] = field(default_factory=set)
    incarnations: int = 0

    def armed(self, task_id: str) -> bool:
        row = self.rows[task_id]
        return is_armed((row.fire_ms, task_id), row.gen, self.marks)

    # R6: insert with gen = arm_gen (a new id, or one deleted before).
    def insert(self, task_id: str, fire_ms: int) -> None:
        if task_id in self.rows:
            return
        self.incarnations += 1
        self.rows[task_id] = Row(fire_ms, self.marks.gen, self.incarnations)

    # R7: cancel an unarmed row.
    def cancel(self, task_id: str) -> None:
        if task_id in self.rows and not self.armed(task_id):
            del self.rows[task_id]

    # R6: reschedule an unarmed row.
    def reschedule(self, task_id: str, fire_ms: int) -> None:
        if task_id in self.rows and not self.armed(task_id):
            row = self.rows[task_id]
            row.fire_ms, row.gen = fire_ms, self.marks.gen

    # R5: the delete after confirm, of a row the owner holds.
    def confirm(self, task_id: str) -> None:
        row = self.rows.get(task_id)
        if row is not None and (task_id, row.incarnation) in self.memory:
            self.memory.discard((task_id, row.incarnation))
            del self.rows[task_id]

    def reads(self, horizon_ms: int, limit: int) -> tuple[list[Mark], list[Mark]]:
        """The two reads of R3 step 2, as a store makes them."""
        top = arm_horizon(horizon_ms, self.marks)
        marks = sorted((row.fire_ms, task_id) for task_id, row in self.rows.items())
        ranged = [m for m in marks if m > self.marks.armed and m[0] <= top]
        fresh = [m for m in marks if self.rows[m[1]].gen == self.marks.gen and m[0] <= top]
        return ranged[:limit], fresh[:limit]

    # R3: one arming pass, applied as a store would; ``mode`` is how the store
    # read (see CUT_MODES).
    def arm(self, horizon_ms: int, limit: int, mode: int = 0) -> ArmPlan[Mark] | None:
        ranged, fresh = self.reads(horizon_ms, limit)
        cuts: dict[str, Mark] = {}
        if mode == 1:  # a fresh-only pass: the range not read at all
            ranged, cuts["ranged_cut"] = [], self.marks.armed
        elif mode == 2 and ranged:  # the ranged read cut short by a shared limit
            ranged = ranged[: len(ranged) // 2]
            cuts["ranged_cut"] = ranged[-1] if ranged else self.marks.armed
        elif mode == 3 and fresh:  # the fresh read cut short by a shared limit
            fresh = fresh[: len(fresh) // 2]
            cuts["fresh_cut"] = fresh[-1] if fresh else NOTHING
        result = plan_arming(self.marks, horizon_ms, ranged, fresh, limit, same, **cuts)
        if result is None:
            return None
        check_plan(result, self.marks, ranged, fresh, limit)
        self.marks = result.marks
        if result.settle:  # each taken row is armed by its own gen
            for _, task_id in result.taken:
                assert self.rows[task_id].gen == self.marks.gen
                self.rows[task_id].gen = self.marks.gen - 1
        for _, task_id in result.taken:
            key = (task_id, self.rows[task_id].incarnation)
            assert key not in self.taken_ever, f"{key} taken twice"  # (c)
            self.taken_ever.add(key)
            self.memory.add(key)
        return result

    def check(self) -> None:
        for task_id, row in self.rows.items():
            if self.armed(task_id):  # (a): armed only by being read
                assert (task_id, row.incarnation) in self.memory, (
                    f"{task_id} {row} armed unread under {self.marks}"
                )
        for task_id, incarnation in self.memory:  # (b): taken stays armed until deleted
            assert self.rows[task_id].incarnation == incarnation
            assert self.armed(task_id), f"{task_id} unarmed again under {self.marks}"


def check_plan(
    result: ArmPlan[Mark], old: ShardMarks, ranged: list[Mark], fresh: list[Mark], limit: int
) -> None:
    assert 1 <= len(result.taken) <= limit
    assert result.taken == sorted(set(result.taken))  # in mark order, once each
    assert set(result.taken) <= set(ranged) | set(fresh)
    if result.settle:
        assert result.marks == old
        assert all(m < old.armed for m in result.taken)
    else:
        assert result.marks.gen == old.gen + 1
    assert result.marks.armed >= old.armed


# Times in operations are offsets from the watermark's time (0 while it is
# BOTTOM): rows due in the past, below the watermark, or ahead of it; horizons
# ahead of it or behind (a clock estimate that stepped back).
offsets = st.integers(min_value=-8, max_value=12)
ids = st.sampled_from(IDS)
limits = st.sampled_from([1, 2, 3, 4, 5])
inserts = st.tuples(st.just("insert"), ids, offsets)
passes = st.tuples(st.just("arm"), st.integers(min_value=-5, max_value=12), limits)
# A pass whose reads were cut by the store (fresh-only, or a shared limit):
# value = limit + 10 * mode.
cut_passes = st.tuples(
    st.just("arm"),
    st.integers(min_value=-5, max_value=12),
    st.builds(lambda limit, mode: limit + 10 * mode, limits, st.sampled_from([1, 2, 3])),
)
# Weighted towards inserts and passes, so that passes meet more rows than they
# have room for, below the watermark too (settles).
operations = st.lists(
    st.one_of(
        inserts,
        inserts,
        inserts,
        passes,
        passes,
        cut_passes,
        st.tuples(st.just("cancel"), ids, st.just(0)),
        st.tuples(st.just("reschedule"), ids, offsets),
        st.tuples(st.just("confirm"), ids, st.just(0)),
    ),
    min_size=20,
    max_size=60,
)


def base_ms(marks: ShardMarks) -> int:
    return 0 if marks.armed == BOTTOM else marks.armed[0]


def run(shard: Shard, operation: tuple[str, str | int, int]) -> None:
    name, subject, value = operation
    if name == "arm":
        assert isinstance(subject, int)
        shard.arm(base_ms(shard.marks) + subject, value % 10, value // 10)
        return
    assert isinstance(subject, str)
    if name == "insert":
        shard.insert(subject, base_ms(shard.marks) + value)
    elif name == "cancel":
        shard.cancel(subject)
    elif name == "reschedule":
        shard.reschedule(subject, base_ms(shard.marks) + value)
    else:
        shard.confirm(subject)


@BUDGET
@given(operations, st.lists(limits, min_size=1, max_size=4))
def test_one_shard_arms_every_row_once_and_only_when_read(
    steps: list[tuple[str, str | int, int]], limits: list[int]
) -> None:
    shard = Shard()
    for operation in steps:
        run(shard, operation)
        shard.check()
    # (d) liveness: passes above every fire_ms take every row, in a bounded
    # number of passes, and then find nothing more.
    horizon = max([row.fire_ms for row in shard.rows.values()], default=0) + 1
    for i in range(len(shard.rows) + 2):
        shard.arm(horizon, limits[i % len(limits)])
        shard.check()
    assert {(task_id, row.incarnation) for task_id, row in shard.rows.items()} == shard.memory
    assert shard.arm(horizon, limits[0]) is None


# A shard's state as a store may hold it: a watermark (BOTTOM now and then);
# rows of the current generation or an older one, around the watermark's time
# (offsets from it); the pass's horizon near that time, below it too.
watermarks = st.one_of(
    st.tuples(st.integers(min_value=0, max_value=20), st.sampled_from((*IDS, "", TOP_ID))),
    st.tuples(st.integers(min_value=0, max_value=20), st.sampled_from((*IDS, "", TOP_ID))),
    st.tuples(st.integers(min_value=0, max_value=20), st.sampled_from((*IDS, "", TOP_ID))),
    st.just(BOTTOM),
)
row_states = st.lists(
    st.none() | st.tuples(st.integers(-4, 6), st.integers(min_value=0, max_value=3)),
    min_size=len(IDS),
    max_size=len(IDS),
)


@settings(BUDGET, max_examples=1000)
@given(
    watermarks,
    st.integers(min_value=1, max_value=3),
    row_states,
    st.integers(min_value=-3, max_value=6),
    st.sampled_from([1, 2, 3, 4, 5]),
)
def test_one_pass_from_any_state_arms_exactly_what_it_takes(
    armed: Mark, gen: int, rows: list[tuple[int, int] | None], ahead_ms: int, limit: int
) -> None:
    marks = ShardMarks(armed, gen)
    base = base_ms(marks)
    # The armed rows are in memory (taken by earlier passes).
    shard = Shard(marks)
    for task_id, row in zip(IDS, rows, strict=True):
        if row is None:
            continue
        shard.insert(task_id, base + row[0])
        shard.rows[task_id].gen = min(row[1], gen)
        if shard.armed(task_id):
            shard.memory.add((task_id, shard.rows[task_id].incarnation))
    shard.taken_ever = set(shard.memory)
    shard.check()
    unarmed = {task_id for task_id in shard.rows if not shard.armed(task_id)}
    result = shard.arm(base + ahead_ms, limit)
    shard.check()  # every row it arms was taken; nothing armed before is unarmed
    now_armed = {task_id for task_id in unarmed if shard.armed(task_id)}
    if result is None:
        assert not now_armed
        assert shard.reads(base + ahead_ms, limit) == ([], [])
    else:
        assert now_armed == {task_id for _, task_id in result.taken}


# -- reads cut by the store (a fresh-only pass; a limit shared between shards) ----------


def test_a_fresh_only_pass_takes_fresh_rows_below_the_watermark_and_keeps_it() -> None:
    marks = ShardMarks((100, TOP_ID), 5)
    result = plan_arming(marks, 120, [], [(50, "a"), (110, "b")], 10, same, ranged_cut=marks.armed)
    assert result is not None
    assert result.taken == [(50, "a")]  # (110, "b") is above the watermark: the range's
    assert result == ArmPlan([(50, "a")], ShardMarks((100, TOP_ID), 6))  # nothing left below


def test_a_fresh_only_pass_with_nothing_fresh_below_the_watermark_arms_nothing() -> None:
    marks = ShardMarks((100, TOP_ID), 5)
    assert plan_arming(marks, 120, [], [(110, "b")], 10, same, ranged_cut=marks.armed) is None


def test_a_fresh_read_cut_by_a_shared_limit_settles_what_it_took() -> None:
    marks = ShardMarks((100, TOP_ID), 5)
    result = plan_arming(marks, 120, [], [(10, "a"), (20, "b")], 10, same, fresh_cut=(20, "b"))
    assert result == ArmPlan([(10, "a"), (20, "b")], marks, settle=True)  # more may be unread


def test_a_fresh_read_cut_before_its_first_row_arms_nothing() -> None:
    marks = ShardMarks((100, TOP_ID), 5)
    assert plan_arming(marks, 120, [(101, "r")], [], 10, same, fresh_cut=NOTHING) is None
