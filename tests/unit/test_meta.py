"""Task metadata (domain/meta.py): make_meta's limits and the fields its errors
name, the stored record's round trip (as the MySQL store writes and reads it),
the late-fire policy's boundaries and parse_late."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cost import MAX_RATIO, cost_ratio

from triggerhook.domain.meta import (
    FIRE,
    MAX_HEADER_VALUE_BYTES,
    MAX_HEADERS,
    MAX_HEADERS_BYTES,
    MAX_TAGS,
    NO_META,
    LateKind,
    LatePolicy,
    Meta,
    from_record,
    make_meta,
    parse_late,
)
from triggerhook.domain.recurrence import Recurrence
from triggerhook.errors import ValidationError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def refused(field: str, **fields: object) -> ValidationError:
    """make_meta(**fields) raises a ValidationError naming ``field``; returns it."""
    with pytest.raises(ValidationError) as info:
        make_meta(**fields)  # type: ignore[arg-type]
    assert info.value.field == field, info.value
    return info.value


def stored(meta: Meta) -> bytes | None:
    """th_tasks.meta as the MySQL store writes it (meta_blob): JSON, None when none."""
    return msgspec.json.encode(meta.to_record()) if meta else None


def read_back(blob: bytes | None) -> Meta:
    """The Meta the MySQL store reads from th_tasks.meta (meta_of, without its
    fallback: a record from_record refuses raises here)."""
    if blob is None:
        return NO_META
    record = msgspec.json.decode(blob)
    assert isinstance(record, dict)
    return from_record(record)


def typed(headers: tuple[tuple[str, object], ...]) -> list[tuple[str, type, object]]:
    """Headers with each value's type: True == 1 in Python, not in AMQP."""
    return [(name, type(value), value) for name, value in headers]


# -- NO_META ----------------------------------------------------------------------------


def test_no_meta_is_false_and_any_metadata_is_true() -> None:
    assert not NO_META
    assert bool(NO_META) is False
    assert bool(Meta()) is False
    for meta in (
        Meta(tags=("a",)),
        Meta(content_type="text/plain"),
        Meta(content_encoding="gzip"),
        Meta(headers=(("a", 1),)),
        Meta(late=FIRE),
        Meta(recur=Recurrence(every_ms=60_000)),
    ):
        assert bool(meta) is True, meta


def test_nothing_given_is_no_meta() -> None:
    assert make_meta() is NO_META
    assert make_meta(tags=[], headers={}) is NO_META
    assert make_meta(late=FIRE) == Meta(late=FIRE)


# -- tags -------------------------------------------------------------------------------


def test_tags_are_a_set_sorted_without_duplicates() -> None:
    assert make_meta(tags=["b", "a", "b", "a:1/x.y-z_"]).tags == ("a", "a:1/x.y-z_", "b")
    assert make_meta(tags=("z",)).tags == ("z",)
    assert make_meta(tags=["t"] * MAX_TAGS).tags == ("t",)
    eight = [f"t{i}" for i in range(MAX_TAGS)]
    assert make_meta(tags=list(reversed(eight))).tags == tuple(sorted(eight))


def test_tags_count() -> None:
    error = refused("tags", tags=[f"t{i}" for i in range(MAX_TAGS + 1)])
    assert "at most 8" in error.message
    # The count is of the list as given (checked before any other work).
    refused("tags", tags=["same"] * (MAX_TAGS + 1))
    refused("tags", tags=["x"] * 1_000_000)


@pytest.mark.parametrize(
    ("tags", "field"),
    [
        ("abc", "tags"),  # a string is not a list of strings
        ({"a": 1}, "tags"),
        (5, "tags"),
        ([""], "tags[0]"),
        (["ok", "a" * 65], "tags[1]"),
        (["ok", "ok2", "sp ace"], "tags[2]"),
        (["é"], "tags[0]"),
        (["a*"], "tags[0]"),
        (["a\n"], "tags[0]"),
        (["ok", 5], "tags[1]"),
        ([None], "tags[0]"),
    ],
)
def test_bad_tags_name_the_field(tags: object, field: str) -> None:
    refused(field, tags=tags)


def test_tag_pattern_limits_are_accepted() -> None:
    longest = "A" * 64
    assert make_meta(tags=[longest, "0", "._:/-"]).tags == ("._:/-", "0", longest)


# -- content_type / content_encoding --------------------------------------------------


@pytest.mark.parametrize("field", ["content_type", "content_encoding"])
def test_properties_are_printable_ascii_of_1_to_255(field: str) -> None:
    for good in (
        " ",
        "~",
        "a" * 255,
        'application/json; charset="utf-8"',
        "".join(map(chr, range(32, 127))),
    ):
        meta = (
            make_meta(content_type=good)
            if field == "content_type"
            else make_meta(content_encoding=good)
        )
        assert getattr(meta, field) == good
        assert (
            getattr(meta, "content_encoding" if field == "content_type" else "content_type") is None
        )
    for bad in ("", "a" * 256, "tab\there", "new\nline", "\x7f", "caf\u00e9", "\x00", 5, b"gzip"):
        refused(field, **{field: bad})


# -- headers ----------------------------------------------------------------------------


def test_headers_are_sorted_by_name_and_keep_their_types() -> None:
    meta = make_meta(headers={"b": "text", "a": True, "c": 7, "B": False, "d": ""})
    assert typed(meta.headers) == [
        ("B", bool, False),
        ("a", bool, True),
        ("b", str, "text"),
        ("c", int, 7),
        ("d", str, ""),
    ]


def test_headers_count() -> None:
    most = {f"h{i}": i for i in range(MAX_HEADERS)}
    assert len(make_meta(headers=most).headers) == MAX_HEADERS
    error = refused("headers", headers={f"h{i}": i for i in range(MAX_HEADERS + 1)})
    assert "at most 16" in error.message


def test_headers_total_size() -> None:
    # names and values as UTF-8, an integer or a boolean counting 8 bytes
    value = "v" * (MAX_HEADER_VALUE_BYTES - 3)  # with its 3-character name: 1024
    four = {f"h{i:02d}": value for i in range(4)}
    assert sum(len(k) + len(v) for k, v in four.items()) == MAX_HEADERS_BYTES
    assert len(make_meta(headers=four).headers) == 4
    refused("headers", headers={**four, "h": True})
    one_more = {("h000" if k == "h00" else k): v for k, v in four.items()}  # 4097 bytes
    refused("headers", headers=one_more)
    # a 2-byte character counts 2
    refused("headers", headers={**four, "h00": value[:-1] + "\u00e9"})
    three = {f"h{i:02d}": value for i in range(3)}
    rest = MAX_HEADERS_BYTES - 3 * MAX_HEADER_VALUE_BYTES - 3 - (3 + 8)
    exact = {**three, "h03": "v" * rest, "h04": 1}
    assert len(make_meta(headers=exact).headers) == 5
    assert len(make_meta(headers={**exact, "h04": False}).headers) == 5
    refused("headers", headers={**exact, "h03": "v" * (rest + 1)})
    refused("headers", headers={**exact, "h03": "v" * (rest + 1), "h04": True})


def test_a_header_value_is_at_most_1024_bytes_of_utf8() -> None:
    assert make_meta(headers={"a": "v" * MAX_HEADER_VALUE_BYTES}).headers[0][1] == "v" * 1024
    assert make_meta(headers={"a": "\u00e9" * 512}).headers[0][1] == "\u00e9" * 512
    refused("headers.a", headers={"a": "v" * (MAX_HEADER_VALUE_BYTES + 1)})
    refused("headers.a", headers={"a": "\u00e9" * 512 + "v"})  # 1025 bytes, 513 characters
    refused("headers.a", headers={"a": "\U0001f600" * 257})  # 4 bytes each


def test_a_header_value_must_be_valid_utf8() -> None:
    refused("headers.a", headers={"a": "lone \ud800 surrogate"})


@pytest.mark.parametrize(
    "name",
    ["a", "Content-Type", "!", "~" * 128, "a.b:c/d", "x", "X", "xa", "-x-", "y-a", "x_a", "ax-"],
)
def test_good_header_names(name: str) -> None:
    assert make_meta(headers={name: 1}).headers == ((name, 1),)


@pytest.mark.parametrize("name", ["", "a b", " a", "a" * 129, "caf\u00e9", "tab\t", "\x7f", "nl\n"])
def test_bad_header_names_name_the_headers(name: str) -> None:
    refused("headers", headers={name: 1})


def test_a_header_name_must_be_a_string() -> None:
    refused("headers", headers={5: 1})
    refused("headers", headers={None: 1})


@pytest.mark.parametrize("name", ["x-", "x-a", "X-a", "x-A", "X-Triggerhook-Dead-Cause", "x-rev"])
def test_x_names_are_reserved_in_any_case(name: str) -> None:
    error = refused(f"headers.{name}", headers={"ok": 1, name: "v"})
    assert "reserved" in error.message


@pytest.mark.parametrize(
    "value",
    [
        1.5,
        float("inf"),
        float("nan"),
        2.0**63,
        None,
        [1],
        {"a": 1},
        b"bytes",
        INT64_MAX + 1,
        INT64_MIN - 1,
        10**30,
        -(10**30),
    ],
)
def test_header_values_are_strings_int64s_or_booleans(value: object) -> None:
    refused("headers.h", headers={"ok": 1, "h": value})


def test_an_integral_float_is_the_integer_json_means() -> None:
    # JSON (and JSON Schema) 5.0 is the integer 5: stored, compared and sent as one.
    meta = make_meta(headers={"h": 5.0, "z": -0.0}, late=parse_late({"skip_after_ms": 250.0}))
    assert typed(meta.headers) == [("h", int, 5), ("z", int, 0)]
    assert meta == make_meta(headers={"h": 5, "z": 0}, late=parse_late({"skip_after_ms": 250}))


def test_int64_range_and_booleans() -> None:
    meta = make_meta(headers={"max": INT64_MAX, "min": INT64_MIN, "t": True, "f": False, "z": 0})
    assert typed(meta.headers) == [
        ("f", bool, False),
        ("max", int, INT64_MAX),
        ("min", int, INT64_MIN),
        ("t", bool, True),
        ("z", int, 0),
    ]


def test_a_boolean_is_not_the_integer_it_equals() -> None:
    # Metadata is content: a re-create with {"a": 1} after {"a": true} is another
    # task (409), and the event's header differs (AMQP boolean vs long).
    assert make_meta(headers={"a": True}) != make_meta(headers={"a": 1})
    assert make_meta(headers={"a": False}) != make_meta(headers={"a": 0})


def test_headers_must_be_a_mapping() -> None:
    refused("headers", headers=[("a", 1)])
    refused("headers", headers="a=1")


@pytest.mark.parametrize(
    ("make", "small_n"),
    [
        (lambda n: {"headers": {"h": 10**n}}, 20_000),  # one huge integer
        (lambda n: {"headers": {"h": -(10**n)}}, 20_000),
        (lambda n: {"headers": {f"h{i}": 10**n for i in range(MAX_HEADERS)}}, 5_000),
        (lambda n: {"headers": {"h": "v" * n}}, 100_000),  # a huge value
        (lambda n: {"headers": {"h" * n: 1}}, 100_000),  # a huge name
        (lambda n: {"tags": ["t"] * n}, 100_000),  # a huge list
        (lambda n: {"tags": ["t" * n]}, 100_000),  # a huge tag
        (lambda n: {"content_type": "c" * n}, 100_000),
    ],
)
def test_huge_values_cost_linear_time(make: object, small_n: int) -> None:
    def run(fields: object) -> object:
        assert isinstance(fields, Mapping)
        return make_meta(**fields)

    ratio = cost_ratio(run, make, small_n, (ValidationError,))  # type: ignore[arg-type]
    assert ratio < MAX_RATIO, f"10x the input cost {ratio:.0f}x the time"


# -- the stored record -------------------------------------------------------------------

tag_strategy = st.from_regex(r"[A-Za-z0-9._:/-]{1,64}", fullmatch=True)
property_strategy = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=255
)
header_names = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=128
).filter(lambda name: not name[:2].lower().startswith("x-"))
header_values: st.SearchStrategy[str | int | bool] = (
    st.text(max_size=200).filter(lambda s: len(s.encode()) <= MAX_HEADER_VALUE_BYTES)
    | st.integers(INT64_MIN, INT64_MAX)
    | st.booleans()
)
late_strategy = (
    st.none()
    | st.just(FIRE)
    | st.builds(
        LatePolicy,
        st.sampled_from([LateKind.SKIP_AFTER, LateKind.DEADLINE]),
        st.integers(0, INT64_MAX),
    )
)


def _size(headers: Mapping[str, str | int | bool]) -> int:
    return sum(len(k) + (len(v.encode()) if isinstance(v, str) else 8) for k, v in headers.items())


@st.composite
def metas(draw: st.DrawFn) -> Meta:
    """Any Meta make_meta accepts, from values inside every documented limit."""
    headers = draw(
        st.dictionaries(header_names, header_values, max_size=MAX_HEADERS).filter(
            lambda h: _size(h) <= MAX_HEADERS_BYTES
        )
    )
    return make_meta(
        tags=draw(st.lists(tag_strategy, max_size=MAX_TAGS)),
        content_type=draw(st.none() | property_strategy),
        content_encoding=draw(st.none() | property_strategy),
        headers=headers,
        late=draw(late_strategy),
    )


@given(metas(), st.none() | st.builds(Recurrence, every_ms=st.integers(1, 10**9)))
def test_a_meta_is_true_exactly_when_it_differs_from_no_meta(
    meta: Meta, recur: Recurrence | None
) -> None:
    # __bool__ reads the fields itself (every published event asks); it must
    # agree with the equality that defines "no metadata".
    for each in (meta, replace(meta, recur=recur)):
        assert bool(each) is (each != NO_META), each


def _same(a: Meta, b: Meta) -> None:
    assert a == b
    assert typed(a.headers) == typed(b.headers)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(metas())
def test_any_valid_meta_round_trips_through_the_stored_json(meta: Meta) -> None:
    # As the MySQL store writes th_tasks.meta and reads it back.
    blob = stored(meta)
    if not meta:
        assert blob is None
        assert read_back(blob) is NO_META
        return
    assert blob is not None
    _same(read_back(blob), meta)  # validated again, and raising nothing
    assert read_back(blob).to_record() == meta.to_record() == msgspec.json.decode(blob)


def test_to_record_holds_only_what_is_set() -> None:
    assert NO_META.to_record() == {}
    meta = make_meta(
        tags=["b", "a"],
        content_type="text/plain",
        content_encoding="gzip",
        headers={"n": 1, "b": True, "s": "x"},
        late=LatePolicy(LateKind.DEADLINE, 5),
    )
    assert meta.to_record() == {
        "tags": ["a", "b"],
        "content_type": "text/plain",
        "content_encoding": "gzip",
        "headers": {"b": True, "n": 1, "s": "x"},
        "late": {"deadline_ms": 5},
    }
    assert make_meta(late=FIRE).to_record() == {"late": "fire"}
    assert make_meta(late=LatePolicy(LateKind.SKIP_AFTER, 0)).to_record() == {
        "late": {"skip_after_ms": 0}
    }
    assert from_record({}) is NO_META


def test_from_record_validates_again() -> None:
    with pytest.raises(ValidationError) as info:
        from_record({"headers": {"x-evil": 1}})
    assert info.value.field == "headers.x-evil"
    with pytest.raises(ValidationError) as late:
        from_record({"late": {"skip_after_ms": -1}})
    assert late.value.field == "late.skip_after_ms"


@pytest.mark.parametrize(
    "late",
    [
        LatePolicy(LateKind.SKIP_AFTER, -1),
        LatePolicy(LateKind.DEADLINE, -1),
        LatePolicy(LateKind.SKIP_AFTER, INT64_MAX + 1),
        LatePolicy(LateKind.FIRE, 5),
    ],
)
def test_what_make_meta_accepts_as_late_round_trips(late: LatePolicy) -> None:
    """make_meta either refuses the policy, or the task reads back with it (a
    policy stored that from_record refuses makes the MySQL store's meta_of log
    an error and drop ALL the task's metadata, its tags and headers too)."""
    try:
        meta = make_meta(tags=["keep"], late=late)
    except ValidationError as exc:
        assert exc.field.startswith("late")
        return
    assert read_back(stored(meta)) == meta


# -- the late-fire policy ------------------------------------------------------------------


def test_skip_after_boundaries() -> None:
    policy = LatePolicy(LateKind.SKIP_AFTER, 250)
    due = 1_800_000_000_000
    assert policy.too_late(due, due - 5) is None  # early
    assert policy.too_late(due, due) is None
    assert policy.too_late(due, due + 250) is None  # exactly N ms late: fires
    assert policy.too_late(due, due + 250.0) is None
    why = policy.too_late(due, due + 251)  # N + 1: does not
    assert why is not None
    assert why.startswith("late: 251 ms")
    assert "250" in why
    assert policy.too_late(due, due + 250.5) is not None  # more than N, by the clock


def test_skip_after_zero_fires_only_on_time() -> None:
    policy = LatePolicy(LateKind.SKIP_AFTER, 0)
    assert policy.too_late(1000, 1000) is None
    assert policy.too_late(1000, 999) is None
    assert policy.too_late(1000, 1001) is not None


def test_deadline_boundaries() -> None:
    deadline = 1_800_000_000_000
    policy = LatePolicy(LateKind.DEADLINE, deadline)
    due = deadline - 10_000
    assert policy.too_late(due, deadline - 1) is None
    assert policy.too_late(due, deadline) is None  # at the deadline: fires
    why = policy.too_late(due, deadline + 1)
    assert why is not None
    assert why.startswith("late: 1 ms past its deadline")
    # The deadline counts, not the due time: a due time after it is skipped at once.
    assert LatePolicy(LateKind.DEADLINE, 5).too_late(10, 10) is not None


def test_fire_is_never_too_late() -> None:
    assert FIRE.too_late(0, 10**15) is None
    assert LatePolicy(LateKind.FIRE) == FIRE


def test_parse_late_reads_what_to_json_writes() -> None:
    for policy in (
        FIRE,
        LatePolicy(LateKind.SKIP_AFTER, 0),
        LatePolicy(LateKind.SKIP_AFTER, 250),
        LatePolicy(LateKind.DEADLINE, 1_800_000_000_000),
        LatePolicy(LateKind.SKIP_AFTER, INT64_MAX),
    ):
        assert parse_late(policy.to_json()) == policy
    assert parse_late("fire") is FIRE


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("FIRE", "late"),
        ("skip", "late"),
        (None, "late"),
        (5, "late"),
        (["fire"], "late"),
        ({}, "late"),
        ({"skip_after_ms": 1, "deadline_ms": 2}, "late"),
        ({"fire": 1}, "late.fire"),
        ({"skip_after": 1}, "late.skip_after"),
        ({"deadline": 1}, "late.deadline"),  # the HTTP form: converted before parse_late
        ({"skip_after_ms": -1}, "late.skip_after_ms"),
        ({"skip_after_ms": True}, "late.skip_after_ms"),
        ({"skip_after_ms": 1.5}, "late.skip_after_ms"),
        ({"skip_after_ms": "1"}, "late.skip_after_ms"),
        ({"skip_after_ms": None}, "late.skip_after_ms"),
        ({"skip_after_ms": INT64_MAX + 1}, "late.skip_after_ms"),
        ({"deadline_ms": -5}, "late.deadline_ms"),
        ({"deadline_ms": False}, "late.deadline_ms"),
    ],
)
def test_parse_late_errors_name_the_field(value: object, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_late(value)
    assert info.value.field == field


def test_parse_late_prefixes_the_callers_field() -> None:
    with pytest.raises(ValidationError) as info:
        parse_late({"skip_after_ms": -1}, "tasks[3].late")
    assert info.value.field == "tasks[3].late.skip_after_ms"
    with pytest.raises(ValidationError) as shape:
        parse_late("never", "tasks[3].late")
    assert shape.value.field == "tasks[3].late"
