"""Series of a recurring task (domain/recurrence.py) and their use in the
task's metadata (domain/meta.py: next_occurrence, stopping, the stored
record) and in resolve (domain/spec.py: the first due time).

The expectations come from the module docstrings and docs/api.md ("A
series ..."): ``every`` is elapsed time (an ISO 8601 duration, at least 1 s);
``cron`` is 5 fields in an IANA time zone, evaluated as Debian's cron does
across daylight-saving changes; occurrences missed in an outage are not
replayed; ``until`` is inclusive. Every instant is asserted in UTC epoch ms.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triggerhook.domain import recurrence
from triggerhook.domain.bounds import MAX_DUE_MS
from triggerhook.domain.meta import (
    FIRE,
    NO_META,
    Meta,
    make_meta,
    next_occurrence,
    stopping,
)
from triggerhook.domain.meta import from_record as meta_from_record
from triggerhook.domain.recurrence import (
    Recurrence,
    every_text,
    make_recurrence,
    parse_cron,
    parse_every,
    parse_zone,
)
from triggerhook.domain.spec import TaskRules, TaskSpec, resolve
from triggerhook.errors import ValidationError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
BERLIN = ZoneInfo("Europe/Berlin")
SECOND, MINUTE, HOUR, DAY = 1000, 60_000, 3_600_000, 86_400_000
RULES = TaskRules(default_routing_key="series.test", max_payload_bytes=1024)
HUGE = 100_000  # characters of a hostile input


def utc_ms(text: str) -> int:
    """An RFC 3339 time (with its offset) as epoch ms, exactly (no float)."""
    return (datetime.fromisoformat(text) - EPOCH) // timedelta(milliseconds=1)


def local(ms: int) -> str:
    """Epoch ms as Berlin wall time with its offset: ``2026-10-25T02:30+0200``."""
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(BERLIN).strftime("%Y-%m-%dT%H:%M%z")


def cron_series(cron: str, zone: str = "Europe/Berlin", **fields: object) -> Recurrence:
    made = make_recurrence(cron=cron, timezone=zone, **fields)  # type: ignore[arg-type]
    assert made is not None
    return made


def on_time_chain(recur: Recurrence, first_ms: int, count: int) -> list[int]:
    """The first occurrence and the ``count`` after it, each confirmed exactly on time."""
    dues = [first_ms]
    for _ in range(count):
        nxt = recur.next_ms(dues[-1], dues[-1])
        assert nxt is not None
        dues.append(nxt)
    return dues


def refused_spec(field: str, **fields: object) -> ValidationError:
    """resolve(TaskSpec(**fields)) raises a ValidationError naming ``field``."""
    with pytest.raises(ValidationError) as info:
        resolve(TaskSpec(**fields), utc_ms("2026-06-01T12:00:00+00:00"), RULES)  # type: ignore[arg-type]
    assert info.value.field == field, info.value
    return info.value


# --- parse_every / every_text ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("PT15M", 15 * MINUTE),
        ("P1D", DAY),
        ("P2W", 14 * DAY),
        ("PT1.5S", 1500),
        ("PT1,5S", 1500),  # ISO 8601's decimal comma
        ("P1DT2H3M4.005S", DAY + 2 * HOUR + 3 * MINUTE + 4005),
        ("PT1S", 1000),
        ("PT1H", HOUR),
        ("PT999999999S", 999_999_999 * SECOND),  # 9 digits: the most a part may have
    ],
)
def test_parse_every_accepts_iso_8601_durations(text: str, ms: int) -> None:
    assert parse_every(text) == ms


def test_parse_every_takes_milliseconds_as_an_int() -> None:
    assert parse_every(1500) == 1500
    assert parse_every(MAX_DUE_MS) == MAX_DUE_MS


@pytest.mark.parametrize(
    "value",
    [
        "P1M",  # months: calendar time, use cron
        "P1Y",
        "P1Y2M",
        "PT",
        "P",
        "P1DT",
        "",
        "PT0.5S",  # below 1 s
        "PT0.999S",
        "P0D",
        "PT0S",
        "1h",
        "15m",
        "pt15m",
        "PT1.0001S",  # beyond the millisecond
        "P" + "1" * 70 + "D",  # overlong text
        "PT" + "0" * 61 + "1S",  # 65 characters: over the cap even if it means 1 s
        "P1234567890D",  # 10-digit numbers
        "PT1234567890S",
        "PT1234567890M",
        "P999999999W",  # past year 9999
        " PT15M",
        "PT15M ",
        "PT-1S",
        "P\u0661D",  # ARABIC-INDIC DIGIT ONE: not an ASCII digit
        True,  # a bool is not a number of milliseconds
        False,
        999,  # ms below 1 s
        0,
        -1000,
        MAX_DUE_MS + 1,
        1.5,
        1000.0,
        None,
        b"PT15M",
    ],
)
def test_parse_every_refuses(value: object) -> None:
    with pytest.raises(ValidationError) as info:
        parse_every(value)
    assert info.value.field == "every"


def test_parse_every_names_the_field_it_is_given() -> None:
    with pytest.raises(ValidationError) as info:
        parse_every("P1M", field="tasks[2].every")
    assert info.value.field == "tasks[2].every"


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (1000, "PT1S"),
        (1500, "PT1.5S"),
        (1050, "PT1.05S"),
        (1005, "PT1.005S"),
        (15 * MINUTE, "PT15M"),
        (DAY, "P1D"),
        (14 * DAY, "P14D"),
        (DAY + 2 * HOUR + 3 * MINUTE + 4005, "P1DT2H3M4.005S"),
        (DAY + 1000, "P1DT1S"),
    ],
)
def test_every_text(ms: int, text: str) -> None:
    assert every_text(ms) == text
    assert parse_every(text) == ms


@given(st.integers(min_value=1000, max_value=MAX_DUE_MS))
def test_every_text_parses_back_to_the_same_milliseconds(ms: int) -> None:
    text = every_text(ms)
    assert parse_every(text) == ms
    assert text.startswith("P")


def test_hostile_every_is_refused() -> None:
    for text in ("P" + "1" * HUGE + "D", "PT" + "1" * HUGE + "S", "P" * HUGE, "PT1H" * HUGE):
        with pytest.raises(ValidationError) as info:
            parse_every(text)
        assert info.value.field == "every"


# --- next_ms: every ----------------------------------------------------------


def test_every_next_is_one_period_after_when_confirmed_on_time() -> None:
    recur = Recurrence(every_ms=15 * MINUTE)
    due = utc_ms("2026-06-01T09:00:00.250+00:00")
    assert recur.next_ms(due, due) == due + 15 * MINUTE
    # Confirmed a little late, or early (armed before its due time): the same.
    assert recur.next_ms(due, due + 1234.5) == due + 15 * MINUTE
    assert recur.next_ms(due, due - 200) == due + 15 * MINUTE
    assert recur.next_ms(due, due + 15 * MINUTE - 0.5) == due + 15 * MINUTE


def test_every_outage_is_not_replayed() -> None:
    """After an outage one occurrence fires; the next is the first period
    boundary after now, on the grid of the first due time."""
    period = 15 * MINUTE
    recur = Recurrence(every_ms=period)
    first = utc_ms("2026-06-01T09:00:00.250+00:00")
    dues = on_time_chain(recur, first, 3)
    assert dues == [first + k * period for k in range(4)]
    now = dues[-1] + 10 * period + 7 * MINUTE  # back after 10 periods and a half
    after_outage = recur.next_ms(dues[-1], now)
    assert after_outage == first + 14 * period
    assert after_outage is not None
    assert (after_outage - first) % period == 0
    assert now < after_outage <= now + period
    # Back exactly on a boundary: that one is not in the future, the next is.
    assert recur.next_ms(first, first + 5 * period) == first + 6 * period


@given(
    due=st.integers(min_value=0, max_value=10**13),
    period=st.integers(min_value=1000, max_value=10 * DAY),
    late=st.integers(min_value=-500, max_value=10**11),
)
def test_every_next_is_the_first_boundary_after_due_and_now(
    due: int, period: int, late: int
) -> None:
    now = due + late
    nxt = Recurrence(every_ms=period).next_ms(due, now)
    assert nxt is not None
    assert (nxt - due) % period == 0
    assert nxt > max(due, now)
    assert nxt - period <= max(due, now)


def test_every_until_is_inclusive() -> None:
    due = utc_ms("2026-06-01T09:00:00+00:00")
    assert Recurrence(every_ms=HOUR, until_ms=due + HOUR).next_ms(due, due) == due + HOUR
    assert Recurrence(every_ms=HOUR, until_ms=due + HOUR - 1).next_ms(due, due) is None
    # After an outage the until still holds for the occurrence that would come next.
    assert Recurrence(every_ms=HOUR, until_ms=due + 3 * HOUR).next_ms(due, due + 3 * HOUR) is None


def test_every_ends_past_the_last_due_time() -> None:
    assert Recurrence(every_ms=SECOND).next_ms(MAX_DUE_MS - SECOND, 0) == MAX_DUE_MS
    assert Recurrence(every_ms=SECOND).next_ms(MAX_DUE_MS - 500, 0) is None
    assert Recurrence(every_ms=MAX_DUE_MS).next_ms(1, 1) is None


def test_stopped_series_ends() -> None:
    due = utc_ms("2026-06-01T09:00:00+00:00")
    assert Recurrence(every_ms=HOUR, stopped=True).next_ms(due, due) is None
    assert cron_series("* * * * *").next_ms(due, due) is not None
    assert Recurrence(cron="* * * * *", stopped=True).next_ms(due, due) is None


@pytest.mark.parametrize(
    ("first", "wall_after"),
    [
        ("2026-03-28T09:00:00+01:00", "2026-03-29T10:00+0200"),  # clocks forward
        ("2026-10-24T09:00:00+02:00", "2026-10-25T08:00+0100"),  # clocks back
    ],
)
def test_every_day_is_elapsed_time_across_dst(first: str, wall_after: str) -> None:
    recur = make_recurrence(every="P1D")
    assert recur is not None
    due = utc_ms(first)
    nxt = recur.next_ms(due, due)
    assert nxt == due + 86_400_000
    assert local(nxt) == wall_after  # the local wall time shifts by an hour


# --- next_ms: cron in Europe/Berlin across daylight saving -------------------


def test_cron_time_in_the_spring_gap_fires_at_the_end_of_the_gap() -> None:
    """2026-03-29: clocks go 02:00 -> 03:00; 02:30 does not exist that day."""
    recur = cron_series("30 2 * * *")
    first = recur.aligned_ms(utc_ms("2026-03-27T12:00:00+00:00"))
    assert on_time_chain(recur, first, 3) == [
        utc_ms("2026-03-28T01:30:00+00:00"),  # 02:30 +01:00
        utc_ms("2026-03-29T01:00:00+00:00"),  # 03:00 +02:00, the first minute after the gap
        utc_ms("2026-03-30T00:30:00+00:00"),  # 02:30 +02:00
        utc_ms("2026-03-31T00:30:00+00:00"),
    ]
    assert local(utc_ms("2026-03-29T01:00:00+00:00")) == "2026-03-29T03:00+0200"
    # A series created on the day, before the gap: its first is the end of the gap.
    assert recur.aligned_ms(utc_ms("2026-03-29T00:00:00+00:00")) == utc_ms(
        "2026-03-29T01:00:00+00:00"
    )


def test_cron_time_in_the_repeated_hour_fires_once() -> None:
    """2026-10-25: clocks go 03:00 -> 02:00; 02:30 happens twice, fires the first time."""
    recur = cron_series("30 2 * * *")
    first = recur.aligned_ms(utc_ms("2026-10-23T12:00:00+00:00"))
    dues = on_time_chain(recur, first, 3)
    assert dues == [
        utc_ms("2026-10-24T00:30:00+00:00"),  # 02:30 +02:00
        utc_ms("2026-10-25T00:30:00+00:00"),  # 02:30 +02:00, the first pass
        utc_ms("2026-10-26T01:30:00+00:00"),  # 02:30 +01:00
        utc_ms("2026-10-27T01:30:00+00:00"),
    ]
    assert [local(d) for d in dues[:3]] == [
        "2026-10-24T02:30+0200",
        "2026-10-25T02:30+0200",
        "2026-10-26T02:30+0100",
    ]
    assert utc_ms("2026-10-25T01:30:00+00:00") not in dues  # the second 02:30


@pytest.mark.parametrize(
    ("cron", "expected_local"),
    [
        (
            "*/30 * * * *",
            ["02:00+0200", "02:30+0200", "02:00+0100", "02:30+0100"],
        ),
        ("0 * * * *", ["02:00+0200", "02:00+0100"]),
    ],
)
def test_cron_hourly_or_more_often_runs_in_both_passes_of_the_repeated_hour(
    cron: str, expected_local: list[str]
) -> None:
    recur = cron_series(cron)
    start = utc_ms("2026-10-24T23:59:00+00:00")  # 01:59 +02:00
    first = recur.aligned_ms(start)
    assert first == utc_ms("2026-10-25T00:00:00+00:00")
    in_hour = [d for d in on_time_chain(recur, first, 6) if d < utc_ms("2026-10-25T02:00:00+00:00")]
    step = (2 * HOUR) // len(expected_local)  # the local hour 02 lasts two real hours
    assert in_hour == [first + k * step for k in range(len(expected_local))]
    assert [local(d)[-10:] for d in in_hour] == expected_local


def test_cron_every_30_minutes_in_the_repeated_hour_exactly() -> None:
    recur = cron_series("*/30 * * * *")
    first = recur.aligned_ms(utc_ms("2026-10-24T23:45:00+00:00"))  # 01:45 +02:00
    assert on_time_chain(recur, first, 5) == [
        utc_ms("2026-10-25T00:00:00+00:00"),  # 02:00 +02:00
        utc_ms("2026-10-25T00:30:00+00:00"),  # 02:30 +02:00
        utc_ms("2026-10-25T01:00:00+00:00"),  # 02:00 +01:00
        utc_ms("2026-10-25T01:30:00+00:00"),  # 02:30 +01:00
        utc_ms("2026-10-25T02:00:00+00:00"),  # 03:00 +01:00
        utc_ms("2026-10-25T02:30:00+00:00"),
    ]


def test_cron_outage_is_not_replayed() -> None:
    recur = cron_series("0 9 * * *")
    due = utc_ms("2026-06-01T07:00:00+00:00")  # Monday 09:00 +02:00
    now = utc_ms("2026-06-03T08:00:00+00:00")  # back on Wednesday 10:00
    assert recur.next_ms(due, now) == utc_ms("2026-06-04T07:00:00+00:00")
    # Back before Wednesday's 09:00: that one fires, not Tuesday's.
    assert recur.next_ms(due, utc_ms("2026-06-03T06:59:59.999+00:00")) == utc_ms(
        "2026-06-03T07:00:00+00:00"
    )
    # On time, or early: the next day.
    assert recur.next_ms(due, due) == utc_ms("2026-06-02T07:00:00+00:00")
    assert recur.next_ms(due, due - 200) == utc_ms("2026-06-02T07:00:00+00:00")


def test_cron_until_is_inclusive() -> None:
    due = utc_ms("2026-06-01T07:00:00+00:00")
    nxt = utc_ms("2026-06-02T07:00:00+00:00")
    assert cron_series("0 9 * * *", until_ms=nxt).next_ms(due, due) == nxt
    assert cron_series("0 9 * * *", until_ms=nxt - 1).next_ms(due, due) is None


def test_cron_in_utc_by_default() -> None:
    recur = make_recurrence(cron="0 9 * * *")
    assert recur == Recurrence(cron="0 9 * * *", timezone="UTC")
    due = utc_ms("2026-06-01T09:00:00+00:00")
    assert recur.next_ms(due, due) == utc_ms("2026-06-02T09:00:00+00:00")


@pytest.mark.parametrize(
    ("cron", "zone", "due"),
    [
        ("0 0 1 1 *", "UTC", "9999-06-01T00:00:00+00:00"),  # next: 10000-01-01
        ("* * * * *", "Pacific/Kiritimati", "9999-12-31T23:58:00+00:00"),  # +14:00: year 10000
    ],
)
def test_cron_ends_past_the_last_due_time(cron: str, zone: str, due: str) -> None:
    """Documented: None when the series ended; nothing is due after 9999-12-31."""
    assert cron_series(cron, zone).next_ms(utc_ms(due), utc_ms(due)) is None


# --- first_ms / aligned_ms ---------------------------------------------------


def test_first_without_a_time() -> None:
    now = utc_ms("2026-06-01T12:00:00+00:00")
    assert Recurrence(every_ms=15 * MINUTE).first_ms(now) == now + 15 * MINUTE
    assert Recurrence(every_ms=15 * MINUTE).first_ms(now + 0.25) == now + 1 + 15 * MINUTE
    assert Recurrence(cron="*/5 * * * *").first_ms(now + 61_000.5) == now + 5 * MINUTE
    assert cron_series("0 9 * * *").first_ms(now) == utc_ms("2026-06-02T07:00:00+00:00")


def test_aligned_with_a_given_time() -> None:
    at = utc_ms("2026-06-01T12:00:00+00:00")
    assert Recurrence(every_ms=HOUR).aligned_ms(at + 123) == at + 123  # that time itself
    assert Recurrence(cron="0 12 * * *").aligned_ms(at) == at  # a matching minute: itself
    assert Recurrence(cron="0 12 * * *").aligned_ms(at + 1) == at + DAY
    assert Recurrence(cron="* * * * *").aligned_ms(at + 30_000) == at + MINUTE
    assert Recurrence(cron="* * * * *").aligned_ms(at - 1) == at


# --- resolve: the first due time and the fields it refuses -------------------


def test_resolve_every_without_a_time_is_one_period_from_now() -> None:
    now = utc_ms("2026-06-01T12:00:00+00:00") + 0.5
    task = resolve(TaskSpec(every="PT15M", routing_key="a.b"), now, RULES)
    assert task.due_ms == utc_ms("2026-06-01T12:00:00+00:00") + 1 + 15 * MINUTE
    assert task.meta.recur == Recurrence(every_ms=15 * MINUTE)
    assert task.meta.recur.occurrence == 1


def test_resolve_every_with_a_time_starts_then() -> None:
    now = utc_ms("2026-06-01T12:00:00+00:00")
    at_ms = now + 7 * MINUTE + 3
    assert resolve(TaskSpec(every="P1D", at_ms=at_ms), now, RULES).due_ms == at_ms
    assert resolve(TaskSpec(every=90_000, delay_ms=5000), now, RULES).due_ms == now + 5000
    task = resolve(TaskSpec(every="PT1M", at="2026-06-01T12:30:00.250Z"), now, RULES)
    assert task.due_ms == utc_ms("2026-06-01T12:30:00.250+00:00")
    assert task.meta.recur == Recurrence(every_ms=MINUTE)


def test_resolve_cron_with_a_time_is_the_first_matching_minute_at_or_after_it() -> None:
    now = utc_ms("2026-06-01T00:00:00+00:00")
    spec = TaskSpec(cron="0 9 * * *", timezone="Europe/Berlin", at="2026-06-03T07:00:00Z")
    task = resolve(spec, now, RULES)
    assert task.due_ms == utc_ms("2026-06-03T07:00:00+00:00")  # 09:00 +02:00 itself
    assert task.meta.recur == Recurrence(cron="0 9 * * *", timezone="Europe/Berlin")
    later = TaskSpec(cron="0 9 * * *", timezone="Europe/Berlin", at="2026-06-03T07:00:00.001Z")
    assert resolve(later, now, RULES).due_ms == utc_ms("2026-06-04T07:00:00+00:00")
    by_delay = TaskSpec(cron="*/10 * * * *", delay_ms=61_000)
    assert resolve(by_delay, now, RULES).due_ms == now + 10 * MINUTE


def test_resolve_cron_without_a_time_is_the_next_matching_minute() -> None:
    now = utc_ms("2026-06-01T08:30:15.5+00:00")
    task = resolve(TaskSpec(cron="0 9 * * *"), now, RULES)
    assert task.due_ms == utc_ms("2026-06-01T09:00:00+00:00")


def test_resolve_until() -> None:
    now = utc_ms("2026-06-01T12:00:00+00:00")
    first = now + HOUR
    # until equal to the first occurrence: allowed (inclusive), kept in ms.
    task = resolve(TaskSpec(every="PT1H", until=first / 1000), now, RULES)
    assert task.due_ms == first
    assert task.meta.recur == Recurrence(every_ms=HOUR, until_ms=first)
    with pytest.raises(ValidationError) as info:
        resolve(TaskSpec(every="PT1H", until=(first - 1) / 1000), now, RULES)
    assert info.value.field == "until"
    cron = TaskSpec(cron="0 9 * * *", at="2026-06-01T09:00:30Z", until="2026-06-01T09:00:45Z")
    with pytest.raises(ValidationError) as info:
        resolve(cron, now, RULES)  # its first occurrence is the next day
    assert info.value.field == "until"


@pytest.mark.parametrize(
    ("field", "fields"),
    [
        ("timezone", {"every": "PT1M", "timezone": "Europe/Berlin"}),
        ("timezone", {"every": "PT1M", "timezone": "UTC"}),
        ("every", {"every": "PT1M", "cron": "* * * * *"}),
        ("timezone", {"at_ms": 5000, "timezone": "Europe/Berlin"}),
        ("until", {"at_ms": 5000, "until": "2026-07-01T00:00:00Z"}),
        ("every", {"every": "P1M"}),
        ("every", {"every": "PT0.5S"}),
        ("timezone", {"cron": "* * * * *", "timezone": "Mars/Olympus"}),
        ("timezone", {"cron": "* * * * *", "timezone": "europe/berlin_nowhere"}),
        ("timezone", {"cron": "* * * * *", "timezone": "../../etc/passwd"}),
        ("timezone", {"cron": "* * * * *", "timezone": "/etc/localtime"}),
        ("timezone", {"cron": "* * * * *", "timezone": "Europe/../../../etc/passwd"}),
        ("timezone", {"cron": "* * * * *", "timezone": "Europe/Berlin/"}),
        ("timezone", {"cron": "* * * * *", "timezone": ""}),
        ("cron", {"cron": "* * * *"}),
        ("cron", {"cron": "* * * * * *"}),
        ("cron", {"cron": "0 0 * * * 2026"}),
        ("cron", {"cron": "@daily"}),
        ("cron", {"cron": ""}),
        ("cron", {"cron": "   "}),
        ("cron", {"cron": "61 * * * *"}),
        ("cron", {"cron": "* 24 * * *"}),
        ("cron", {"cron": "* * 32 * *"}),
        ("cron", {"cron": "* * * 13 *"}),
        ("cron", {"cron": "* * * * 8"}),
        ("cron", {"cron": "a b c d e"}),
        ("cron", {"cron": "0 0 30 2 *"}),  # never matches
        ("until", {"every": "PT1M", "until": "not a time"}),
    ],
)
def test_resolve_refuses(field: str, fields: dict[str, object]) -> None:
    refused_spec(field, **fields)


def test_resolve_prefixes_the_field() -> None:
    with pytest.raises(ValidationError) as info:
        resolve(TaskSpec(every="PT1M", timezone="UTC"), 0, RULES, field="tasks[3]")
    assert info.value.field == "tasks[3].timezone"


def test_resolve_refuses_a_cron_series_beyond_year_9999() -> None:
    """Bad input is a ValidationError (docs/api.md: never a 5xx), also when the
    first matching minute would be after 9999-12-31."""
    for spec in (
        TaskSpec(cron="0 0 1 1 *", at="9999-12-31T23:00:00Z"),
        TaskSpec(cron="* * * * *", timezone="Pacific/Kiritimati", at="9999-12-31T23:00:00Z"),
    ):
        with pytest.raises(ValidationError):
            resolve(spec, 0, RULES)


# --- parse_zone / parse_cron / make_recurrence -------------------------------


@pytest.mark.parametrize(
    "zone", ["UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+5"]
)
def test_parse_zone_accepts_iana_names(zone: str) -> None:
    assert parse_zone(zone) == zone


def test_parse_zone_default_is_utc() -> None:
    assert parse_zone(None) == "UTC"


@pytest.mark.parametrize(
    "zone", ["../../etc/passwd", "/etc/localtime", "./UTC", "UTC\x00", "Europe\\Berlin", 5, b"UTC"]
)
def test_parse_zone_refuses_paths_and_non_names(zone: object) -> None:
    with pytest.raises(ValidationError) as info:
        parse_zone(zone)
    assert info.value.field == "timezone"


def test_parse_zone_refuses_the_hosts_localtime() -> None:
    """'localtime' is no IANA zone: on Debian it is /usr/share/zoneinfo/localtime,
    a link to /etc/localtime (the host's own zone, whatever that is)."""
    with pytest.raises(ValidationError) as info:
        parse_zone("localtime")
    assert info.value.field == "timezone"


def test_parse_cron_normalizes_whitespace() -> None:
    assert parse_cron("  30  2\t* *  * ", "UTC") == "30 2 * * *"
    assert make_recurrence(cron="30\t2 * * *") == Recurrence(cron="30 2 * * *")


def test_make_recurrence_without_a_series() -> None:
    assert make_recurrence() is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cron", "* " * (HUGE // 2)),
        ("cron", "1" * HUGE),
        ("cron", "*/" + "1" * HUGE + " * * * *"),
        ("every", "P" + "1" * (HUGE - 2) + "D"),
        ("timezone", "A" * HUGE),
        ("timezone", "Europe/" * (HUGE // 7)),
    ],
)
def test_hostile_text_is_refused(field: str, value: str) -> None:
    fields: dict[str, object] = {"cron": "* * * * *"} if field == "timezone" else {}
    fields[field] = value
    with pytest.raises(ValidationError) as info:
        make_recurrence(**fields)  # type: ignore[arg-type]
    assert info.value.field == field
    refused_spec(field, **fields)


# --- the stored record (Recurrence.to_record / from_record, Meta) ------------

CRONS = ["* * * * *", "30 2 * * *", "*/30 * * * *", "0 9 * * 1-5", "0 0 L * *", "5,35 */2 1 1,7 *"]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kathmandu", "Australia/Lord_Howe"]
until_values = st.none() | st.integers(min_value=0, max_value=MAX_DUE_MS)
recurrences = st.one_of(
    st.builds(
        Recurrence,
        every_ms=st.integers(min_value=1000, max_value=MAX_DUE_MS),
        until_ms=until_values,
        occurrence=st.integers(min_value=1, max_value=2**53),
        stopped=st.booleans(),
    ),
    st.builds(
        Recurrence,
        cron=st.sampled_from(CRONS),
        timezone=st.sampled_from(ZONES),
        until_ms=until_values,
        occurrence=st.integers(min_value=1, max_value=2**53),
        stopped=st.booleans(),
        dst_repeated=st.sampled_from([None, "first", "last", "both"]),
        dst_skipped=st.sampled_from([None, "shift", "skip"]),
    ),
)


def stored(record: dict[str, object]) -> dict[str, object]:
    """As a store keeps it: through JSON."""
    loaded = json.loads(json.dumps(record))
    assert isinstance(loaded, dict)
    return loaded


@given(recurrences)
def test_recurrence_record_round_trip(recur: Recurrence) -> None:
    assert recurrence.from_record(stored(recur.to_record())) == recur


@given(recurrences, st.lists(st.sampled_from(["a", "b:1", "c/d"]), max_size=3))
def test_meta_record_round_trip_with_recur(recur: Recurrence, tags: list[str]) -> None:
    meta = make_meta(tags=tags, headers={"h": "v", "n": 3}, late=FIRE, recur=recur)
    record = stored(meta.to_record())
    assert "recur" in record
    assert meta_from_record(record) == meta


def test_record_shape() -> None:
    assert Recurrence(every_ms=1000).to_record() == {"n": 1, "every_ms": 1000}
    assert Recurrence(
        cron="* * * * *", timezone="Europe/Berlin", until_ms=5, occurrence=3, stopped=True
    ).to_record() == {
        "n": 3,
        "cron": "* * * * *",
        "timezone": "Europe/Berlin",
        "until_ms": 5,
        "stopped": True,
    }
    assert make_meta(recur=Recurrence(every_ms=1000)).to_record() == {
        "recur": {"n": 1, "every_ms": 1000}
    }


@pytest.mark.parametrize(
    ("field", "record"),
    [
        ("recur", None),
        ("recur", []),
        ("recur", "every_ms=1000"),
        ("recur", [("every_ms", 1000)]),
        ("recur", {}),
        ("recur", {"n": 2}),
        ("until", {"n": 1, "until_ms": 5000}),  # an end without a schedule
        ("recur.n", {"every_ms": 1000, "n": 0}),
        ("recur.n", {"every_ms": 1000, "n": -1}),
        ("recur.n", {"every_ms": 1000, "n": "1"}),
        ("recur.n", {"every_ms": 1000, "n": 1.0}),
        ("recur.n", {"every_ms": 1000, "n": None}),
        ("recur.n", {"every_ms": 1000, "n": True}),  # JSON true is no occurrence number
        ("every", {"every_ms": 999, "n": 1}),
        ("every", {"every_ms": "PT1M", "n": 1, "cron": "* * * * *"}),
        ("cron", {"cron": "* * * *", "timezone": "UTC", "n": 1}),
        ("timezone", {"cron": "* * * * *", "timezone": "Mars/Olympus", "n": 1}),
    ],
)
def test_from_record_refuses_malformed_records(field: str, record: object) -> None:
    with pytest.raises(ValidationError) as info:
        recurrence.from_record(record)
    assert info.value.field == field


def test_from_record_refuses_an_until_that_is_not_a_number() -> None:
    """meta.from_record's contract: what a store kept is "validated again"; an
    end that is no integer must not be dropped silently (the series would
    never end)."""
    for until in ("2026-06-01T00:00:00Z", 1.5e12, [1]):
        with pytest.raises(ValidationError):
            recurrence.from_record({"every_ms": 1000, "n": 1, "until_ms": until})


def test_meta_from_record_refuses_a_malformed_recur() -> None:
    with pytest.raises(ValidationError) as info:
        meta_from_record({"tags": ["a"], "recur": {"n": 1}})
    assert info.value.field == "recur"


# --- next_occurrence / stopping ----------------------------------------------


def series_meta(recur: Recurrence) -> Meta:
    return make_meta(
        tags=["b", "a"],
        content_type="application/json",
        headers={"h": "v", "k": 7},
        late=FIRE,
        recur=recur,
    )


def test_next_occurrence_counts_up_and_keeps_the_rest() -> None:
    due = utc_ms("2026-06-01T09:00:00+00:00")
    meta = series_meta(Recurrence(every_ms=HOUR, until_ms=due + 5 * HOUR, occurrence=3))
    result = next_occurrence(meta, due, due + 10)
    assert result is not None
    next_due, next_meta = result
    assert next_due == due + HOUR
    assert next_meta.recur == Recurrence(every_ms=HOUR, until_ms=due + 5 * HOUR, occurrence=4)
    assert next_meta.tags == ("a", "b")
    assert next_meta.headers == (("h", "v"), ("k", 7))
    assert next_meta.content_type == "application/json"
    assert next_meta.late == FIRE
    assert meta.recur is not None
    assert meta.recur.occurrence == 3  # the original is unchanged


def test_next_occurrence_of_a_cron_series() -> None:
    due = utc_ms("2026-10-25T00:30:00+00:00")
    meta = series_meta(cron_series("30 2 * * *"))
    result = next_occurrence(meta, due, due)
    assert result is not None
    assert result[0] == utc_ms("2026-10-26T01:30:00+00:00")
    assert result[1].recur is not None
    assert result[1].recur.occurrence == 2


def test_next_occurrence_none_when_no_series_or_ended() -> None:
    due = utc_ms("2026-06-01T09:00:00+00:00")
    assert next_occurrence(NO_META, due, due) is None
    assert next_occurrence(make_meta(tags=["a"]), due, due) is None
    ended = series_meta(Recurrence(every_ms=HOUR, until_ms=due))
    assert next_occurrence(ended, due, due) is None
    assert next_occurrence(series_meta(Recurrence(every_ms=HOUR, stopped=True)), due, due) is None


def test_stopping() -> None:
    due = utc_ms("2026-06-01T09:00:00+00:00")
    meta = series_meta(Recurrence(every_ms=HOUR, occurrence=5))
    stopped = stopping(meta)
    assert stopped is not None
    assert stopped.recur == Recurrence(every_ms=HOUR, occurrence=5, stopped=True)
    assert (stopped.tags, stopped.headers, stopped.late) == (meta.tags, meta.headers, meta.late)
    assert stopped != meta  # part of the content
    assert next_occurrence(stopped, due, due) is None
    assert stopping(stopped) is None  # stopped already
    assert stopping(NO_META) is None
    assert stopping(make_meta(tags=["a"])) is None
    # A stopped series survives the store.
    assert meta_from_record(stored(stopped.to_record())) == stopped
