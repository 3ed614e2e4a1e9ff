"""The MySQL store's pure helpers (no database needed), the SQL placeholder
lists, the migrations' bookkeeping, and how an arming pass reads several
shards and shares its limit (store/arm_pass.py, used by both stores)."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from triggerhook.domain.arming import TOP_ID, Mark, ShardMarks
from triggerhook.domain.task import CancelResult, InsertOutcome, OnConflict, Task
from triggerhook.interfaces import NewRow
from triggerhook.store import mysql
from triggerhook.store import rows as store_rows
from triggerhook.store.arm_pass import (
    NOTHING,
    Frontier,
    PassReads,
    PassResult,
    plan_pass,
    split_read,
)
from triggerhook.store.mysql import alembic as revisions
from triggerhook.store.mysql import sql
from triggerhook.store.rows import (
    cancel_result,
    conflict_outcome,
    first_wins,
    id_rounds,
    insert_chunks,
)

DUE = 1_700_000_000_000
MIB = 1024 * 1024


def new(name: str, due_ms: int = DUE, payload: bytes = b"", rev: int = 1) -> NewRow:
    return NewRow(Task(name, due_ms, "rk", payload), rev)


# -- placeholders ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "expected"), [(1, "%s"), (2, "%s, %s"), (5, "%s, %s, %s, %s, %s")]
)
def test_placeholders(count: int, expected: str) -> None:
    assert sql.placeholders(count) == expected


def test_placeholders_count_matches_for_a_large_list() -> None:
    assert sql.placeholders(2000).count("%s") == 2000


@pytest.mark.parametrize("count", [0, -1])
def test_placeholders_refuse_an_empty_in_list(count: int) -> None:
    with pytest.raises(ValueError, match="at least one"):
        sql.placeholders(count)


def test_in_list_statements_take_the_placeholders() -> None:
    stmt = sql.DELETE_TASKS.format(ids=sql.placeholders(3))
    assert stmt.count("%s") == 3
    assert "{" not in stmt
    pairs = sql.DELETE_FIRED.format(pairs=sql.placeholders(3, width=2))
    assert "(%s, %s), (%s, %s), (%s, %s)" in pairs
    assert "{" not in pairs


def test_pair_placeholders_refuse_an_empty_in_list() -> None:
    with pytest.raises(ValueError, match="at least one"):
        sql.placeholders(0, width=2)


# -- id_rounds --------------------------------------------------------------------------


def test_id_rounds_without_repeats() -> None:
    assert id_rounds([new("a"), new("b"), new("c")]) == [[0, 1, 2]]


def test_id_rounds_put_each_repeat_after_the_earlier_rows_of_its_id() -> None:
    rows = [new("a"), new("b"), new("a"), new("c"), new("b"), new("a", payload=b"other")]
    assert id_rounds(rows) == [[0, 1, 3], [2, 4], [5]]


def test_id_rounds_of_nothing() -> None:
    assert id_rounds([]) == []


# -- conflict_outcome --------------------------------------------------------------------

RULES = list(OnConflict)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("armed", [False, True])
def test_the_same_content_is_a_safe_retry_whatever_the_rule(rule: OnConflict, armed: bool) -> None:
    # The revision a row would be written with is not part of its content.
    row = NewRow(Task("a", DUE, "rk"), rev=2, on_conflict=rule)
    assert conflict_outcome(row, Task("a", DUE, "rk", rev=3), armed) is InsertOutcome.EXISTS


@pytest.mark.parametrize(
    "changed",
    [Task("a", DUE + 1, "rk"), Task("a", DUE, "rk", b"x"), Task("a", DUE, "other.key")],
)
@pytest.mark.parametrize(
    ("rule", "armed", "expected"),
    [
        (OnConflict.ERROR, False, InsertOutcome.CONFLICT),
        (OnConflict.ERROR, True, InsertOutcome.CONFLICT),
        (OnConflict.KEEP, False, InsertOutcome.KEPT),
        (OnConflict.KEEP, True, InsertOutcome.KEPT),
        (OnConflict.REPLACE, False, InsertOutcome.REPLACED),
        (OnConflict.REPLACE, True, InsertOutcome.TOO_LATE),  # R6r: never an armed row
    ],
)
def test_other_content_is_answered_by_the_rule(
    changed: Task, rule: OnConflict, armed: bool, expected: InsertOutcome
) -> None:
    row = NewRow(changed, on_conflict=rule)
    assert conflict_outcome(row, Task("a", DUE, "rk"), armed) is expected


# -- insert_chunks ----------------------------------------------------------------------------


def chunk_sizes(rows: list[NewRow], indexes: list[int] | None = None) -> list[list[int]]:
    return list(insert_chunks(rows, list(range(len(rows))) if indexes is None else indexes))


def test_insert_chunks_empty() -> None:
    assert chunk_sizes([]) == []


def test_insert_chunks_bounded_in_rows() -> None:
    limit = store_rows.INSERT_CHUNK_ROWS
    rows = [new(f"t{i}") for i in range(2 * limit + 1)]
    chunks = chunk_sizes(rows)
    assert [len(c) for c in chunks] == [limit, limit, 1]
    assert [i for c in chunks for i in c] == list(range(2 * limit + 1))


def test_insert_chunks_exactly_at_the_row_limit_is_one_chunk() -> None:
    limit = store_rows.INSERT_CHUNK_ROWS
    assert [len(c) for c in chunk_sizes([new(f"t{i}") for i in range(limit)])] == [limit]


def test_insert_chunks_bounded_in_payload_bytes() -> None:
    limit = store_rows.INSERT_CHUNK_BYTES
    quarter = b"x" * (limit // 4)
    rows = [new(f"t{i}", payload=quarter) for i in range(9)]
    chunks = chunk_sizes(rows)
    # Four quarters fill a chunk exactly (not over the limit); the fifth starts the next.
    assert chunks == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    for chunk in chunks:
        assert sum(len(rows[i].task.payload) for i in chunk) <= limit


def test_insert_chunks_one_byte_over_starts_a_new_chunk() -> None:
    limit = store_rows.INSERT_CHUNK_BYTES
    rows = [new("a", payload=b"x" * (limit - 10)), new("b", payload=b"x" * 11), new("c")]
    assert chunk_sizes(rows) == [[0], [1, 2]]


def test_insert_chunks_oversized_row_goes_alone() -> None:
    limit = store_rows.INSERT_CHUNK_BYTES
    rows = [new("small", payload=b"x"), new("huge", payload=b"x" * (limit + 1)), new("after")]
    assert chunk_sizes(rows) == [[0], [1], [2]]


def test_insert_chunks_yield_the_given_indexes() -> None:
    rows = [new("a"), new("b"), new("c")]
    assert chunk_sizes(rows, [4, 7, 9]) == [[4, 7, 9]]


def test_insert_chunks_need_one_index_per_row() -> None:
    with pytest.raises(ValueError):
        chunk_sizes([new("a"), new("b")], [0])


# -- cancel results -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("armed", "expected"),
    [
        (None, CancelResult.NOT_FOUND),
        (False, CancelResult.CANCELLED),
        (True, CancelResult.TOO_LATE),
    ],
)
def test_cancel_result_from_the_locked_row(armed: bool | None, expected: CancelResult) -> None:
    assert cancel_result(armed) is expected


def test_first_wins_gives_one_result_per_id_asked() -> None:
    results = {
        "a": CancelResult.CANCELLED,
        "b": CancelResult.TOO_LATE,
        "c": CancelResult.NOT_FOUND,
    }
    assert first_wins(["c", "a", "b", "a", "b", "a", "c"], results) == [
        CancelResult.NOT_FOUND,
        CancelResult.CANCELLED,
        CancelResult.TOO_LATE,
        CancelResult.NOT_FOUND,  # cancelled once: the repeat finds nothing
        CancelResult.TOO_LATE,  # still too late
        CancelResult.NOT_FOUND,
        CancelResult.NOT_FOUND,
    ]
    assert first_wins([], {}) == []


def test_revisions_lead_step_by_step_to_the_schema_version() -> None:
    """One Alembic revision per version, 0001 up to the one schema.sql creates,
    each on the one before: head is this release's schema version."""
    scripts = ScriptDirectory(str(revisions.SCRIPTS))
    chain = [(s.revision, s.down_revision) for s in reversed(list(scripts.walk_revisions()))]
    versions = range(1, sql.SCHEMA_VERSION + 1)
    assert chain == [
        (revisions.revision_of(v), revisions.revision_of(v - 1) if v > 1 else None)
        for v in versions
    ]
    assert revisions.head() == revisions.revision_of(sql.SCHEMA_VERSION) == "0006"
    for script in scripts.walk_revisions():
        assert callable(script.module.upgrade)
    schema = (Path(mysql.__file__).parents[2] / "schema.sql").read_text()
    assert f"('schema_version', '{sql.SCHEMA_VERSION}')" in schema


def test_case_and_derived_table_lists() -> None:
    assert sql.cases(2) == "WHEN %s THEN %s WHEN %s THEN %s"
    assert sql.moves(3).count("%s") == 12 and sql.moves(3).count("UNION ALL") == 2
    assert sql.new_rows(2).count("%s") == 16 and sql.new_rows(1).count("UNION") == 0
    for build in (sql.cases, sql.moves, sql.new_rows):
        with pytest.raises(ValueError):
            build(0)


def test_every_now_is_the_databases() -> None:
    """No statement takes "now" from the client: the lease and heartbeat
    statements compute it with NOW_MS."""
    for stmt in (sql.ACQUIRABLE, sql.ACQUIRE, sql.RENEW, sql.REGISTER, sql.HEARTBEAT):
        assert sql.NOW_MS in stmt
    assert sql.TAKE_OVER_MEMBER.count(sql.NOW_MS) == 2
    assert "NOW()" not in sql.NOW_MS and "UTC_TIMESTAMP(6)" in sql.NOW_MS


# -- arm_pass: the reads of a pass over several shards, and its limit ---------------------------


START = ShardMarks((10, TOP_ID), 1)


def marks_of(n: int, shard: int, due: int = 20) -> list[Mark]:
    return [(due, f"s{shard}-{i:03d}") for i in range(n)]


def _shard(row: tuple[int, Mark]) -> int:
    return row[0]


def _mark(row: tuple[int, Mark]) -> Mark:
    return row[1]


def read(rows: dict[int, list[Mark]], limit: int) -> tuple[dict[int, list[Mark]], Frontier | None]:
    """A read of ``rows`` (shard -> marks) as MySQL makes it: in (shard, mark)
    order, at most ``limit + 1`` rows; split back per shard."""
    ordered = sorted((shard, m) for shard, marks in rows.items() for m in marks)[: limit + 1]
    per_shard, frontier = split_read(ordered, limit, _shard, _mark)
    return {s: [m for _, m in r] for s, r in per_shard.items()}, frontier


def test_a_read_within_its_limit_is_complete() -> None:
    rows, frontier = read({0: marks_of(2, 0), 3: marks_of(1, 3)}, 3)
    assert (rows, frontier) == ({0: marks_of(2, 0), 3: marks_of(1, 3)}, None)


def test_a_cut_read_stops_at_its_last_row_and_later_shards_are_unread() -> None:
    rows, frontier = read({0: marks_of(2, 0), 1: marks_of(3, 1), 2: marks_of(1, 2)}, 3)
    assert rows == {0: marks_of(2, 0), 1: marks_of(1, 1)}
    assert frontier == Frontier(1, marks_of(3, 1)[0])
    assert (frontier.cut(0, START.armed), frontier.cut(1, START.armed)) == (
        None,
        marks_of(3, 1)[0],
    )
    assert frontier.cut(2, START.armed) == START.armed  # not reached: as if not read


def test_a_read_cut_just_before_a_shard_has_not_reached_it() -> None:
    rows, frontier = read({0: marks_of(2, 0), 1: marks_of(3, 1)}, 2)
    assert rows == {0: marks_of(2, 0)}
    assert frontier == Frontier(1, None)
    assert frontier.cut(1, NOTHING) == NOTHING


def _pass(
    ranged: dict[int, list[Mark]], fresh: dict[int, list[Mark]], limit: int
) -> PassResult[Mark]:
    held = {shard: START for shard in range(4)}
    ranged_by, ranged_frontier = read(ranged, limit)
    fresh_by, fresh_frontier = read(fresh, limit)
    reads = PassReads(ranged_by, fresh_by, ranged_frontier, fresh_frontier)
    return plan_pass(held, reads, 100, limit, lambda m: m)


def test_a_pass_shares_its_limit_in_shard_order() -> None:
    result = _pass({0: marks_of(3, 0), 2: marks_of(10, 2)}, {}, 8)
    assert result.taken == {0: marks_of(3, 0), 2: marks_of(10, 2)[:5]}
    assert len(result) == 8
    assert result.marks[0] == ShardMarks((100, TOP_ID), 2)  # read to the horizon
    assert result.marks[2] == ShardMarks(marks_of(10, 2)[4], 2)  # cut: its last row taken


def test_a_pass_over_a_quiet_table_changes_nothing() -> None:
    result = _pass({}, {}, 50)
    assert (result.taken, result.marks, result.settle) == ({}, {}, [])


def test_rows_written_below_the_watermark_beyond_the_room_are_settled() -> None:
    below = marks_of(6, 1, due=5)  # fresh: written since the last pass, past due
    result = _pass({}, {1: below}, 2)
    assert result.taken == {1: below[:2]}
    assert result.settle == below[:2]
    assert result.marks == {}  # the watermark and generation stay


def test_a_shard_past_the_fresh_frontier_arms_nothing_this_pass() -> None:
    # The fresh read was cut in shard 0: shard 1's fresh rows were not read, so
    # it may arm nothing (a bump would arm them unread), ranged rows or not.
    result = _pass({1: marks_of(1, 1)}, {0: marks_of(3, 0, due=5), 1: marks_of(1, 1, due=5)}, 2)
    assert set(result.taken) == {0}
    assert 1 not in result.marks
