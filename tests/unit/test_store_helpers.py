"""The MySQL store's pure helpers (no database needed) and the SQL placeholder list."""

from __future__ import annotations

from pathlib import Path

import pytest

from triggerhook.domain.task import CancelResult, Task
from triggerhook.interfaces import ClaimMode, InsertOutcome, NewRow
from triggerhook.store import mysql, sql
from triggerhook.store.migrations import MIGRATIONS
from triggerhook.store.mysql import (
    _cancel_result,
    _first_wins,
    _insert_chunks,
    _repeat_outcome,
    _split_repeats,
)

DUE = 1_700_000_000_000
MIB = 1024 * 1024


def new(
    name: str, due_ms: int = DUE, payload: bytes = b"", claim: ClaimMode = ClaimMode.NONE
) -> NewRow:
    return NewRow(Task(name, due_ms, "rk", payload), claim)


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
    stmt = sql.CANCEL.format(ids=sql.placeholders(3))
    assert stmt.count("%s") == 3
    assert "{" not in stmt
    pairs = sql.DELETE_FIRED.format(pairs=sql.placeholders(3, width=2))
    assert "(%s, %s), (%s, %s), (%s, %s)" in pairs
    assert "{" not in pairs


def test_pair_placeholders_refuse_an_empty_in_list() -> None:
    with pytest.raises(ValueError, match="at least one"):
        sql.placeholders(0, width=2)


# -- _split_repeats -----------------------------------------------------------------------


def test_split_repeats_without_repeats() -> None:
    assert _split_repeats([new("a"), new("b"), new("c")]) == ([0, 1, 2], {})


def test_split_repeats_maps_each_repeat_to_the_first_row_of_its_id() -> None:
    rows = [new("a"), new("b"), new("a"), new("c"), new("b"), new("a", payload=b"other")]
    first, repeats = _split_repeats(rows)
    assert first == [0, 1, 3]
    assert repeats == {2: 0, 4: 1, 5: 0}


def test_split_repeats_of_nothing() -> None:
    assert _split_repeats([]) == ([], {})


# -- _repeat_outcome -------------------------------------------------------------------------


@pytest.mark.parametrize("earlier_outcome", [InsertOutcome.CREATED, InsertOutcome.EXISTS])
def test_identical_repeat_is_a_safe_retry(earlier_outcome: InsertOutcome) -> None:
    assert _repeat_outcome(new("a"), new("a"), earlier_outcome) is InsertOutcome.EXISTS


def test_identical_repeat_ignores_the_claim_mode() -> None:
    # How a row is held is not part of its content.
    outcome = _repeat_outcome(new("a", claim=ClaimMode.ARM), new("a"), InsertOutcome.CREATED)
    assert outcome is InsertOutcome.EXISTS


@pytest.mark.parametrize(
    "changed",
    [new("a", due_ms=DUE + 1), new("a", payload=b"x"), NewRow(Task("a", DUE, "other.key"))],
)
def test_different_repeat_is_a_conflict(changed: NewRow) -> None:
    assert _repeat_outcome(changed, new("a"), InsertOutcome.CREATED) is InsertOutcome.CONFLICT
    assert _repeat_outcome(changed, new("a"), InsertOutcome.EXISTS) is InsertOutcome.CONFLICT


def test_repeat_of_a_conflicting_row_is_a_conflict() -> None:
    assert _repeat_outcome(new("a"), new("a"), InsertOutcome.CONFLICT) is InsertOutcome.CONFLICT


# -- _insert_chunks ----------------------------------------------------------------------------


def chunk_sizes(rows: list[NewRow], indexes: list[int] | None = None) -> list[list[int]]:
    return list(_insert_chunks(rows, list(range(len(rows))) if indexes is None else indexes))


def test_insert_chunks_empty() -> None:
    assert chunk_sizes([]) == []


def test_insert_chunks_bounded_in_rows() -> None:
    limit = mysql._INSERT_CHUNK_ROWS
    rows = [new(f"t{i}") for i in range(2 * limit + 1)]
    chunks = chunk_sizes(rows)
    assert [len(c) for c in chunks] == [limit, limit, 1]
    assert [i for c in chunks for i in c] == list(range(2 * limit + 1))


def test_insert_chunks_exactly_at_the_row_limit_is_one_chunk() -> None:
    limit = mysql._INSERT_CHUNK_ROWS
    assert [len(c) for c in chunk_sizes([new(f"t{i}") for i in range(limit)])] == [limit]


def test_insert_chunks_bounded_in_payload_bytes() -> None:
    limit = mysql._INSERT_CHUNK_BYTES
    quarter = b"x" * (limit // 4)
    rows = [new(f"t{i}", payload=quarter) for i in range(9)]
    chunks = chunk_sizes(rows)
    # Four quarters fill a chunk exactly (not over the limit); the fifth starts the next.
    assert chunks == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    for chunk in chunks:
        assert sum(len(rows[i].task.payload) for i in chunk) <= limit


def test_insert_chunks_one_byte_over_starts_a_new_chunk() -> None:
    limit = mysql._INSERT_CHUNK_BYTES
    rows = [new("a", payload=b"x" * (limit - 10)), new("b", payload=b"x" * 11), new("c")]
    assert chunk_sizes(rows) == [[0], [1, 2]]


def test_insert_chunks_oversized_row_goes_alone() -> None:
    limit = mysql._INSERT_CHUNK_BYTES
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
    ("firing", "expected"),
    [
        (None, CancelResult.NOT_FOUND),
        (0, CancelResult.CANCELLED),
        (1, CancelResult.TOO_LATE),
    ],
)
def test_cancel_result_from_the_locked_row(firing: int | None, expected: CancelResult) -> None:
    assert _cancel_result(firing) is expected


def test_first_wins_gives_one_result_per_id_asked() -> None:
    results = {
        "a": CancelResult.CANCELLED,
        "b": CancelResult.TOO_LATE,
        "c": CancelResult.NOT_FOUND,
    }
    assert _first_wins(["c", "a", "b", "a", "b", "a", "c"], results) == [
        CancelResult.NOT_FOUND,
        CancelResult.CANCELLED,
        CancelResult.TOO_LATE,
        CancelResult.NOT_FOUND,  # cancelled once: the repeat finds nothing
        CancelResult.TOO_LATE,  # still too late
        CancelResult.NOT_FOUND,
        CancelResult.NOT_FOUND,
    ]
    assert _first_wins([], {}) == []


def test_migrations_lead_step_by_step_to_the_schema_version() -> None:
    """Every version from 2 up to the one schema.sql creates has its migration,
    and each migration ends by writing its own version."""
    assert sorted(MIGRATIONS) == list(range(2, sql.SCHEMA_VERSION + 1))
    for version, statements in MIGRATIONS.items():
        assert statements[-1] == (
            f"UPDATE th_meta SET value = '{version}' WHERE name = 'schema_version'"
        )
    schema = (Path(mysql.__file__).parent.parent / "schema.sql").read_text()
    assert f"('schema_version', '{sql.SCHEMA_VERSION}')" in schema
