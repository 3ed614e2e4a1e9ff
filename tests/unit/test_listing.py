"""Listing (domain/listing.py and api/listing.py's parsers): cursors, filters
and the fields their errors name, id prefix ranges, page sizes, timeline spans,
and the query parameters and bulk cancel body of the HTTP API."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import MultiDict

from triggerhook.api.listing import (
    FILTER_PARAMS,
    LIST_PARAMS,
    TIMELINE_PARAMS,
    parse_bulk_cancel,
    parse_filter,
    single_values,
)
from triggerhook.domain.listing import (
    DEFAULT_PAGE,
    MAX_BUCKET_MS,
    MAX_BUCKETS,
    MAX_PAGE,
    MIN_BUCKET_MS,
    TaskFilter,
    decode_cursor,
    encode_cursor,
    make_filter,
    next_cursor,
    page_limit,
    timeline_span,
)
from triggerhook.domain.meta import make_meta
from triggerhook.domain.task import MAX_DUE_MS, Task, TaskInfo, TaskState
from triggerhook.errors import ValidationError

ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-"
ids = st.text(ID_ALPHABET, min_size=1, max_size=64)
# Small alphabets too, so that shared prefixes and near misses are common.
near_ids = st.text(st.sampled_from("aAz0.:-_"), min_size=1, max_size=8)
due_times = st.integers(0, MAX_DUE_MS)


def refused(field: str, call: object, *args: object, **kwargs: object) -> ValidationError:
    assert callable(call)
    with pytest.raises(ValidationError) as info:
        call(*args, **kwargs)
    assert info.value.field == field, info.value
    return info.value


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


def info(task_id: str, due_ms: int, state: TaskState = TaskState.SCHEDULED) -> TaskInfo:
    return TaskInfo(
        Task(task_id, due_ms, "rk.a", meta=make_meta(tags=["t1", "t2"])),
        state,
    )


# -- cursors -------------------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(due_times, ids)
def test_a_cursor_round_trips(due_ms: int, task_id: str) -> None:
    cursor = encode_cursor((due_ms, task_id))
    assert decode_cursor(cursor) == (due_ms, task_id)
    assert len(cursor) <= 120
    # URL-safe: goes into a query string as it is
    assert set(cursor) <= set(ID_ALPHABET.replace(".", "").replace(":", "") + "=")


def test_the_longest_cursor_decodes() -> None:
    longest = (MAX_DUE_MS, "z" * 64)
    assert decode_cursor(encode_cursor(longest)) == longest
    assert decode_cursor(encode_cursor((0, "a"))) == (0, "a")
    assert decode_cursor(encode_cursor((5, "a:b:c"))) == (5, "a:b:c")  # ids may hold ':'


@pytest.mark.parametrize(
    "cursor",
    [
        None,
        5,
        b"MTAwOmE=",
        "",
        "%%%%",  # not base64
        "!!!!",
        "MTAwOmE",  # padding missing
        "\u00e9\u00e9\u00e9\u00e9",  # not ASCII
        b64("100"),  # no id
        b64("100:"),  # empty id
        b64(":a"),  # no due time
        b64("a:100"),  # the other way round
        b64("-1:a"),
        b64("+1:a"),
        b64(" 1:a"),
        b64("1.5:a"),
        b64("\u0661:a"),  # a digit, but not ASCII
        b64("1:a b"),  # id not matching its pattern
        b64("1:a/b"),
        b64("1:" + "a" * 65),
        b64("1:a\n"),
        b64(f"{MAX_DUE_MS + 1}:a"),  # due > MAX_DUE_MS
        b64("9999999999999999:a"),  # 16 digits
        b64("1:" + "a" * 64) + "A" * 100,  # overlong
        "A" * 121,
        "MTAwOmE=" * 16,
    ],
)
def test_malformed_cursors_are_refused(cursor: object) -> None:
    error = refused("cursor", decode_cursor, cursor)
    assert error.message == "is not a cursor this API gave out"


@pytest.mark.parametrize(
    "cursor",
    [
        "MTAw*OmE=",  # a character outside base64
        " MTAwOmE=",
        "MTAwOmE=\n",
        "MTAw OmE=",
        "MTAwOmE=====",  # padding this API never writes
    ],
)
def test_cursors_not_in_the_form_given_out_are_refused(cursor: str) -> None:
    """A cursor is exactly what encode_cursor made: URL-safe base64, padded
    (each of these decodes, ignoring what is not base64, to the key (100, "a"))."""
    refused("cursor", decode_cursor, cursor)


# -- filters -------------------------------------------------------------------------------


def test_make_filter_keeps_what_it_is_given() -> None:
    where = make_filter(
        prefix="job:1",
        routing_key="rk/a.b",
        tag="t:1/x",
        due_after_ms=5,
        due_before_ms=10,
        state="firing",
    )
    assert where == TaskFilter("job:1", "rk/a.b", "t:1/x", 5, 10, TaskState.FIRING)
    assert make_filter() == TaskFilter()
    assert make_filter(state=TaskState.SCHEDULED).state is TaskState.SCHEDULED
    assert make_filter(prefix="a" * 64).prefix == "a" * 64


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"prefix": ""}, "prefix"),
        ({"prefix": "a" * 65}, "prefix"),
        ({"prefix": "a/b"}, "prefix"),  # ids have no '/'
        ({"prefix": "a b"}, "prefix"),
        ({"prefix": "\u00e9"}, "prefix"),
        ({"prefix": 5}, "prefix"),
        ({"routing_key": ""}, "routing_key"),
        ({"routing_key": "a" * 256}, "routing_key"),
        ({"routing_key": "a b"}, "routing_key"),
        ({"routing_key": b"rk"}, "routing_key"),
        ({"tag": ""}, "tag"),
        ({"tag": "a" * 65}, "tag"),
        ({"tag": "a*"}, "tag"),
        ({"tag": ["a"]}, "tag"),
        ({"state": "armed"}, "state"),
        ({"state": "SCHEDULED"}, "state"),
        ({"state": ""}, "state"),
        ({"state": 1}, "state"),
        ({"state": ["firing"]}, "state"),
        ({"prefix": "ok", "tag": "ok", "state": "nope"}, "state"),
    ],
)
def test_make_filter_errors_name_the_field(fields: dict[str, object], field: str) -> None:
    refused(field, make_filter, **fields)


def test_narrowed() -> None:
    assert not TaskFilter().narrowed
    assert not TaskFilter(due_after_ms=1, due_before_ms=2, state=TaskState.FIRING).narrowed
    assert TaskFilter(prefix="a").narrowed
    assert TaskFilter(tag="a").narrowed
    assert TaskFilter(routing_key="a").narrowed


def test_id_range_of_no_prefix_is_none() -> None:
    assert TaskFilter().id_range() is None
    assert TaskFilter(tag="x").id_range() is None


@settings(max_examples=1000, deadline=None)
@given(st.one_of(ids, near_ids), st.one_of(ids, near_ids))
def test_id_range_holds_exactly_the_ids_with_the_prefix(prefix: str, task_id: str) -> None:
    bounds = TaskFilter(prefix=prefix).id_range()
    assert bounds is not None
    low, high = bounds
    # The database compares ascii_bin: byte order, as Python compares ASCII text.
    assert (low <= task_id < high) == task_id.startswith(prefix), (prefix, task_id)


@settings(max_examples=300, deadline=None)
@given(near_ids, st.text(st.sampled_from("aAz0.:-_"), max_size=4))
def test_every_id_extending_the_prefix_is_inside(prefix: str, rest: str) -> None:
    bounds = TaskFilter(prefix=prefix).id_range()
    assert bounds is not None
    low, high = bounds
    task_id = (prefix + rest)[:64]
    assert low <= task_id < high


def test_id_range_edges() -> None:
    low, high = TaskFilter(prefix="ab").id_range() or ("", "")
    inside = ["ab", "ab-", "ab.", "ab0", "abA", "abz", "ab" + "z" * 62, "ab_"]
    outside = ["a", "aa", "aaz", "ac", "aB", "b", "Ab", "-ab", "a_", "a" + "z" * 63]
    for task_id in inside:
        assert low <= task_id < high, task_id
    for task_id in outside:
        assert not low <= task_id < high, task_id


def test_matches() -> None:
    task = info("job-7", 1000)
    assert TaskFilter().matches(task)
    assert TaskFilter(prefix="job").matches(task)
    assert not TaskFilter(prefix="jobs").matches(task)
    assert TaskFilter(tag="t2").matches(task)
    assert not TaskFilter(tag="t3").matches(task)
    assert TaskFilter(routing_key="rk.a").matches(task)
    assert not TaskFilter(routing_key="rk").matches(task)
    assert TaskFilter(due_after_ms=1000).matches(task)  # inclusive
    assert not TaskFilter(due_after_ms=1001).matches(task)
    assert TaskFilter(due_before_ms=1001).matches(task)
    assert not TaskFilter(due_before_ms=1000).matches(task)  # exclusive
    assert TaskFilter(state=TaskState.SCHEDULED).matches(task)
    assert not TaskFilter(state=TaskState.FIRING).matches(task)


# -- pages ---------------------------------------------------------------------------------


def test_page_limit() -> None:
    assert page_limit(None) == DEFAULT_PAGE == 100
    assert page_limit(1) == 1
    assert page_limit(MAX_PAGE) == MAX_PAGE == 1000
    for bad in (0, -1, MAX_PAGE + 1, True, False, 5.0, "5", 10**100):
        refused("limit", page_limit, bad)


def test_next_cursor() -> None:
    tasks = [info("b", 10), info("a", 20), info("c", 20)]
    assert next_cursor([], 1) is None
    assert next_cursor([], 100) is None
    assert next_cursor(tasks, 4) is None  # shorter than the limit: the last page
    cursor = next_cursor(tasks, 3)  # a full page: always a cursor
    assert cursor is not None
    assert decode_cursor(cursor) == (20, "c")
    assert cursor == encode_cursor((20, "c"))
    single = next_cursor(tasks[:1], 1)
    assert single is not None
    assert decode_cursor(single) == (10, "b")


def test_timeline_span() -> None:
    assert timeline_span(60_000, 60) == (60_000, 60)
    assert timeline_span(MIN_BUCKET_MS, 1) == (1000, 1)
    assert timeline_span(MAX_BUCKET_MS, 12) == (2_678_400_000, 12)  # the longest span
    assert timeline_span(3_600_000, MAX_BUCKETS) == (3_600_000, 1440)
    refused("buckets", timeline_span, MAX_BUCKET_MS, 13)
    refused("buckets", timeline_span, 86_400_000, MAX_BUCKETS)  # 1,440 days
    for bad in (MIN_BUCKET_MS - 1, 0, -1000, MAX_BUCKET_MS + 1, True, 60_000.0, "60000", None):
        refused("bucket", timeline_span, bad, 60)
    for bad in (0, -1, MAX_BUCKETS + 1, True, 1.0, "1", None):
        refused("buckets", timeline_span, 60_000, bad)
    refused("bucket", timeline_span, 0, 0)  # the bucket is checked first


# -- the HTTP API's query parameters ---------------------------------------------------------


def test_single_values() -> None:
    query = MultiDict([("prefix", "a"), ("limit", "5"), ("cursor", "x" * 300)])
    assert single_values(query, LIST_PARAMS) == {"prefix": "a", "limit": "5", "cursor": "x" * 300}
    assert single_values(MultiDict(), LIST_PARAMS) == {}
    assert single_values(MultiDict([("prefix", "")]), FILTER_PARAMS) == {"prefix": ""}


@pytest.mark.parametrize(
    ("pairs", "allowed", "field"),
    [
        ([("nope", "1")], LIST_PARAMS, "nope"),
        ([("prefix", "a"), ("Prefix", "b")], LIST_PARAMS, "Prefix"),  # names are exact
        ([("limit", "5")], FILTER_PARAMS, "limit"),  # count takes no limit
        ([("cursor", "x")], TIMELINE_PARAMS, "cursor"),
        ([("state", "firing")], TIMELINE_PARAMS, "state"),
        ([("start", "1")], LIST_PARAMS, "start"),
        ([("prefix", "a"), ("prefix", "a")], LIST_PARAMS, "prefix"),  # repeated
        ([("tag", "a"), ("limit", "1"), ("tag", "b")], LIST_PARAMS, "tag"),
        ([("cursor", "x" * 301)], LIST_PARAMS, "cursor"),  # overlong
        ([("prefix", "a" * 10_000)], LIST_PARAMS, "prefix"),
        ([("q" * 1000, "1")], LIST_PARAMS, "q" * 64),  # an unknown name is cut short
    ],
)
def test_single_values_refusals_name_the_parameter(
    pairs: list[tuple[str, str]], allowed: frozenset[str], field: str
) -> None:
    refused(field, single_values, MultiDict(pairs), allowed)


def test_single_values_refuses_unknown_before_repeated() -> None:
    refused("nope", single_values, MultiDict([("nope", "1"), ("nope", "2")]), LIST_PARAMS)


def test_parse_filter_from_query_values() -> None:
    values = single_values(
        MultiDict(
            [
                ("prefix", "job-"),
                ("routing_key", "rk.a"),
                ("tag", "t1"),
                ("due_after", "1800000000"),
                ("due_before", "2027-01-01T00:00:00Z"),
                ("state", "scheduled"),
            ]
        ),
        FILTER_PARAMS,
    )
    assert parse_filter(values) == TaskFilter(
        prefix="job-",
        routing_key="rk.a",
        tag="t1",
        due_after_ms=1_800_000_000_000,
        due_before_ms=1_798_761_600_000,
        state=TaskState.SCHEDULED,
    )
    assert parse_filter({}) == TaskFilter()


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("0", 0),
        ("10", 10_000),
        ("1.5", 1_500),
        ("1800000000.25", 1_800_000_000_250),
        ("10.0001", 10_001),  # a sub-millisecond part rounds up
        ("2026-01-01T00:00:00Z", 1_767_225_600_000),
        ("2026-01-01T00:00:00.001Z", 1_767_225_600_001),
        ("2026-01-01T01:00:00+01:00", 1_767_225_600_000),
        ("1960-01-01T00:00:00Z", 0),  # before 1970: the epoch
        ("-5", 0),
    ],
)
def test_filter_times_are_epoch_seconds_or_rfc3339(text: str, ms: int) -> None:
    where = parse_filter({"due_after": text, "due_before": text})
    assert (where.due_after_ms, where.due_before_ms) == (ms, ms)


def test_due_after_is_given_as_is_the_store_makes_it_inclusive() -> None:
    # parse_filter turns the time into milliseconds; including due_after and
    # excluding due_before is the store's (TaskFilter.matches, store/mysql/queries.py).
    where = parse_filter({"due_after": "10", "due_before": "11"})
    assert (where.due_after_ms, where.due_before_ms) == (10_000, 11_000)
    assert where.matches(info("a", 10_000))
    assert where.matches(info("a", 10_999))
    assert not where.matches(info("a", 9_999))
    assert not where.matches(info("a", 11_000))
    # From a bulk cancel's JSON body the times are numbers.
    body = parse_bulk_cancel({"prefix": "a", "due_after": 10, "due_before": 10.5})
    assert (body.due_after_ms, body.due_before_ms) == (10_000, 10_500)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"due_after": "yesterday"}, "due_after"),
        ({"due_before": "2026-13-01T00:00:00Z"}, "due_before"),
        ({"due_after": ""}, "due_after"),
        ({"due_after": "20260101"}, "due_after"),  # ambiguous: a date or epoch seconds
        ({"due_before": "1e400"}, "due_before"),
        ({"due_before": "10000-01-01T00:00:00Z"}, "due_before"),
        ({"due_after": True}, "due_after"),
        ({"due_after": None}, "due_after"),
        ({"due_after": [1]}, "due_after"),
        ({"prefix": "a/b"}, "prefix"),
        ({"tag": "a b"}, "tag"),
        ({"routing_key": ""}, "routing_key"),
        ({"state": "armed"}, "state"),
    ],
)
def test_parse_filter_errors_name_the_parameter(values: dict[str, object], field: str) -> None:
    refused(field, parse_filter, values)


# -- bulk cancel ---------------------------------------------------------------------------


def test_parse_bulk_cancel() -> None:
    assert parse_bulk_cancel({"prefix": "job-"}) == TaskFilter(prefix="job-")
    assert parse_bulk_cancel({"tag": "t"}) == TaskFilter(tag="t")
    assert parse_bulk_cancel({"routing_key": "rk"}) == TaskFilter(routing_key="rk")
    assert parse_bulk_cancel(
        {"tag": "t", "due_after": "2026-01-01T00:00:00Z", "due_before": 1_800_000_000}
    ) == TaskFilter(tag="t", due_after_ms=1_767_225_600_000, due_before_ms=1_800_000_000_000)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "body"),  # must name tasks
        ({"due_after": 1}, "body"),
        ({"due_after": 1, "due_before": 2}, "body"),
        (None, "body"),
        ([{"prefix": "a"}], "body"),
        ("prefix=a", "body"),
        ({"prefix": "a", "state": "scheduled"}, "state"),  # state is refused
        ({"prefix": "a", "limit": 5}, "limit"),
        ({"prefix": "a", "cursor": "x"}, "cursor"),
        ({"prefix": "a", "id": "x"}, "id"),
        ({"prefix": "a", "z" * 500: 1}, "z" * 64),
        ({"prefix": 5}, "prefix"),
        ({"prefix": ""}, "prefix"),
        ({"routing_key": "a b"}, "routing_key"),
        ({"prefix": "a", "due_after": "soon"}, "due_after"),
        ({"prefix": "a", "due_before": False}, "due_before"),
    ],
)
def test_parse_bulk_cancel_errors_name_the_field(body: object, field: str) -> None:
    refused(field, parse_bulk_cancel, body)
