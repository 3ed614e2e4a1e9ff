"""Due times and durations to epoch ms: sub-ms fractions round UP (never early)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from triggerhook.domain.task import MAX_DUE_MS
from triggerhook.domain.timeparse import (
    MAX_DURATION_MS,
    MAX_TEXT_CHARS,
    datetime_to_ms,
    due_from,
    parse_at,
    parse_duration_ms,
    seconds_to_ms,
)
from triggerhook.errors import ValidationError

NEW_YEAR_2024_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z


# -- parse_at: datetimes ------------------------------------------------------------


def test_aware_datetime_in_utc() -> None:
    assert parse_at(datetime(2024, 1, 1, tzinfo=UTC)) == NEW_YEAR_2024_MS


@pytest.mark.parametrize("hours", [-5, 1, 5.5, 14])
def test_aware_datetime_with_offset_is_converted_to_utc(hours: float) -> None:
    tz = timezone(timedelta(hours=hours))
    local = datetime(2024, 1, 1, tzinfo=UTC).astimezone(tz)
    assert local.utcoffset() == timedelta(hours=hours)
    assert parse_at(local) == NEW_YEAR_2024_MS


def test_naive_datetime_is_taken_as_utc() -> None:
    assert parse_at(datetime(2024, 1, 1)) == NEW_YEAR_2024_MS
    assert parse_at(datetime(2024, 1, 1, 0, 0, 1, 500_000)) == NEW_YEAR_2024_MS + 1500


@pytest.mark.parametrize(
    ("micros", "expected_ms"),
    [(0, 0), (1, 1), (999, 1), (1000, 1), (1001, 2), (999_999, 1000)],
)
def test_datetime_microseconds_round_up(micros: int, expected_ms: int) -> None:
    value = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)
    assert datetime_to_ms(value) == NEW_YEAR_2024_MS + expected_ms


# -- parse_at: epoch seconds ----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0),
        (1, 1000),
        (1_704_067_200, NEW_YEAR_2024_MS),
        (1.5, 1500),
        (1.001, 1001),
        (0.0001, 1),  # a tenth of a millisecond: rounds up to 1 ms, never down to 0
        (1e-7, 1),
        (1.0000001, 1001),
        (1_704_067_200.123, NEW_YEAR_2024_MS + 123),
        (Decimal("1.0005"), 1001),
        ("0", 0),
        ("1", 1000),
        ("1.001", 1001),
        ("0.0001", 1),
        (" 1.5 ", 1500),
        ("+2", 2000),
        ("1704067200", NEW_YEAR_2024_MS),
    ],
)
def test_epoch_seconds(value: object, expected: int) -> None:
    assert parse_at(value) == expected


@pytest.mark.parametrize("seconds", [0.0001, 0.0009, 0.3, 1.001, 2.5e-4, 123.4567891])
def test_epoch_seconds_are_never_early(seconds: float) -> None:
    ms = parse_at(seconds)
    assert ms / 1000 >= seconds
    assert ms - 1 < seconds * 1000  # and at most one ms late


# -- parse_at: ISO-8601 ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "2024-01-01T00:00:00Z",
        "2024-01-01T00:00:00+00:00",
        "2024-01-01T01:00:00+01:00",
        "2023-12-31T19:00:00-05:00",
        "2024-01-01T05:30:00+05:30",
        "2024-01-01 00:00:00Z",
        "2024-01-01T00:00:00",  # naive: UTC
        "2024-01-01",
        "  2024-01-01T00:00:00Z  ",
    ],
)
def test_iso_8601(text: str) -> None:
    assert parse_at(text) == NEW_YEAR_2024_MS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-01-01T00:00:00.001Z", NEW_YEAR_2024_MS + 1),
        ("2024-01-01T00:00:00.0001Z", NEW_YEAR_2024_MS + 1),
        ("2024-01-01T00:00:00.000001Z", NEW_YEAR_2024_MS + 1),
        ("2024-01-01T00:00:01.001000+00:00", NEW_YEAR_2024_MS + 1001),
        ("2024-01-01T00:00:01.001001+00:00", NEW_YEAR_2024_MS + 1002),
    ],
)
def test_iso_sub_millisecond_rounds_up(text: str, expected: int) -> None:
    assert parse_at(text) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "tomorrow",
        "2024-13-01T00:00:00Z",
        "2024-01-01T25:00:00Z",
        "1e9",
        "12abc",
        "nan",
        "inf",
        float("nan"),
        float("inf"),
        float("-inf"),
        None,
        True,
        False,
        [2024],
        b"1700000000",
    ],
)
def test_garbage_is_rejected_naming_the_field(value: object) -> None:
    with pytest.raises(ValidationError) as info:
        parse_at(value)
    assert info.value.field == "at"
    with pytest.raises(ValidationError) as named:
        parse_at(value, field="when")
    assert named.value.field == "when"


# -- year bounds -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1970-01-01T00:00:00Z", 0),
        (datetime(1970, 1, 1), 0),
        ("9999-12-31T23:59:59.999Z", MAX_DUE_MS),
        (datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC), MAX_DUE_MS),
        ("253402300799.999", MAX_DUE_MS),
        (253_402_300_799, MAX_DUE_MS - 999),
    ],
)
def test_year_bounds_inclusive(value: object, expected: int) -> None:
    assert parse_at(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "1969-12-31T23:59:59Z",
        datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC),
        "1970-01-01T00:30:00+01:00",  # 1969-12-31T23:30Z
        "0001-01-01T00:00:00+01:00",
        -1,
        "-0.002",
        "9999-12-31T23:59:59.999001Z",  # rounds up past the last representable ms
        datetime(9999, 12, 31, 23, 59, 59, 999_999),
        "9999-12-31T23:00:00-05:00",  # year 10000 in UTC
        253_402_300_800,
        10**30,
    ],
)
def test_outside_1970_to_9999_is_rejected(value: object) -> None:
    with pytest.raises(ValidationError) as info:
        parse_at(value)
    assert info.value.field == "at"
    assert "1970" in info.value.message


def test_seconds_to_ms_names_its_field() -> None:
    with pytest.raises(ValidationError) as info:
        seconds_to_ms("x", field="at_s")
    assert info.value.field == "at_s"


# -- due_from ----------------------------------------------------------------------


NOW = 1_700_000_000_000.0


@pytest.mark.parametrize(
    ("at", "at_ms", "delay_ms"),
    [
        (None, None, None),
        ("2024-01-01T00:00:00Z", 5, None),
        ("2024-01-01T00:00:00Z", None, 5),
        (None, 5, 5),
        (1, 2, 3),
    ],
)
def test_due_from_needs_exactly_one(at: object, at_ms: object, delay_ms: object) -> None:
    with pytest.raises(ValidationError) as info:
        due_from(at, at_ms, delay_ms, NOW)
    assert info.value.field == "at"
    assert "exactly one" in info.value.message


def test_due_from_at() -> None:
    assert due_from("2024-01-01T00:00:00Z", None, None, NOW) == NEW_YEAR_2024_MS
    assert due_from(0, None, None, NOW) == 0  # 0 is given, not missing


def test_due_from_at_ms() -> None:
    assert due_from(None, NEW_YEAR_2024_MS, None, NOW) == NEW_YEAR_2024_MS
    assert due_from(None, 0, None, NOW) == 0
    assert due_from(None, MAX_DUE_MS, None, NOW) == MAX_DUE_MS


@pytest.mark.parametrize("at_ms", [1.5, "1000", True, -1, MAX_DUE_MS + 1])
def test_due_from_bad_at_ms_names_at_ms(at_ms: object) -> None:
    with pytest.raises(ValidationError) as info:
        due_from(None, at_ms, None, NOW)
    assert info.value.field == "at_ms"


@pytest.mark.parametrize(
    ("now", "delay", "expected"),
    [
        (NOW, 0, int(NOW)),
        (NOW, 250, int(NOW) + 250),
        (NOW + 0.2, 250, int(NOW) + 251),  # a fractional now rounds up: never early
        (NOW + 0.999, 0, int(NOW) + 1),
    ],
)
def test_due_from_delay_is_relative_to_now(now: float, delay: int, expected: int) -> None:
    due = due_from(None, None, delay, now)
    assert due == expected
    assert due >= now + delay


@pytest.mark.parametrize("delay_ms", [-1, 1.5, "100", False, MAX_DUE_MS])
def test_due_from_bad_delay_names_delay_ms(delay_ms: object) -> None:
    with pytest.raises(ValidationError) as info:
        due_from(None, None, delay_ms, NOW)
    assert info.value.field == "delay_ms"


# -- parse_duration_ms --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("250ms", 250),
        ("5s", 5000),
        ("2h", 7_200_000),
        ("1h30m", 5_400_000),
        ("1m30s", 90_000),
        ("1h30m15s250ms", 5_415_250),
        ("5m", 300_000),
        ("1d", 86_400_000),
        ("1.5s", 1500),
        ("0.5m", 30_000),
        ("0.0001s", 1),  # rounds up
        ("1.2ms", 2),
        ("0s", 0),
        ("10", 10_000),  # a bare number is seconds
        ("1.5", 1500),
        ("0.0001", 1),
        ("0", 0),
        (" 5S ", 5000),
        ("2H", 7_200_000),
    ],
)
def test_durations(text: str, expected: int) -> None:
    assert parse_duration_ms(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "  ", "abc", "s", "ms", "5 s", "5x", "1h30", "h1", "-5", "-5s", "1h-30m", "1e3", "5s!"],
)
def test_bad_durations_are_rejected(text: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_duration_ms(text)
    assert info.value.field == "in"
    with pytest.raises(ValidationError) as named:
        parse_duration_ms(text, field="delay")
    assert named.value.field == "delay"


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (1_900_000_000.001, 1_900_000_000_001),  # x * 1000 is inexact in binary
        (1_900_000_000.0011, 1_900_000_000_002),  # a real sub-ms part rounds up
        (0.1, 100),
        (0.0001, 1),
        (1.0000001, 1001),
        (253_402_300_799.999, MAX_DUE_MS),
        (1_764_500_000.25, 1_764_500_000_250),
    ],
)
def test_float_seconds_resolve_to_the_millisecond_they_name(seconds: float, expected: int) -> None:
    assert seconds_to_ms(seconds) == expected
    # The exact decimal path agrees.
    assert seconds_to_ms(Decimal(repr(seconds))) == expected


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (253_402_300_799.99902, None),  # 0.02 ms past the last millisecond: out of range
        (253_402_300_798.99902, 253_402_300_799_000),  # rounds up, not down to ...798.999
        (1_900_000_000.0010002, 1_900_000_000_002),  # below an ulp of x * 1000: still up
    ],
)
def test_float_seconds_round_up_at_every_magnitude(seconds: float, expected: int | None) -> None:
    # Found by Schemathesis: a tolerance of a few ulps of x * 1000 rounded these down.
    if expected is None:
        with pytest.raises(ValidationError):
            seconds_to_ms(seconds)
    else:
        assert seconds_to_ms(seconds) == expected


@pytest.mark.parametrize("value", [1e300, 1.7976931348623157e308, 1e15, 10**400])
def test_huge_numbers_are_rejected_not_overflowing(value: float) -> None:
    with pytest.raises(ValidationError) as info:
        seconds_to_ms(value, "at")
    assert info.value.field == "at"


@pytest.mark.parametrize("value", [-1, -0.5, -1e300, -1e308, "1969-12-31T23:59:59Z"])
def test_past_ok_turns_times_before_1970_into_the_epoch(value: object) -> None:
    assert parse_at(value, past_ok=True) == 0
    with pytest.raises(ValidationError):
        parse_at(value)


def test_past_ok_still_rejects_times_after_9999() -> None:
    with pytest.raises(ValidationError) as info:
        parse_at(253_402_300_800, "when", past_ok=True)
    assert info.value.field == "when"


# -- hostile input: length, magnitude, digits, the compact-date ambiguity -----------------


LONG = "9" * 300_000


@pytest.mark.parametrize(
    ("parse", "field"),
    [
        (parse_at, "at"),
        (lambda v: parse_at(v, "when", past_ok=True), "when"),
        (lambda v: seconds_to_ms(v, "at_s"), "at_s"),
        (parse_duration_ms, "in"),
        (lambda v: parse_duration_ms(v, "delay"), "delay"),
    ],
)
@pytest.mark.parametrize("text", [LONG, "-" + LONG, "1." + LONG, " " * 65, LONG + "s"])
def test_long_text_is_refused_by_its_length_without_echoing_it(
    parse: Callable[[str], int], field: str, text: str
) -> None:
    with pytest.raises(ValidationError) as info:
        parse(text)
    assert info.value.field == field
    assert f"over the limit of {MAX_TEXT_CHARS}" in info.value.message
    assert len(str(info.value)) < 200  # the input is never echoed in full


def test_text_at_the_length_limit_is_still_parsed() -> None:
    padded = "1".rjust(MAX_TEXT_CHARS, "0")  # leading zeros: no magnitude at all
    assert len(padded) == MAX_TEXT_CHARS
    assert parse_at(padded) == 1000
    assert parse_duration_ms(padded) == 1000


def test_a_long_garbage_time_is_shown_cut_short() -> None:
    text = "x" * MAX_TEXT_CHARS
    with pytest.raises(ValidationError) as info:
        parse_at(text)
    assert "(64 characters)" in info.value.message
    assert text not in info.value.message


@pytest.mark.parametrize(
    "value",
    [
        "9" * 13,  # 13 digits before the point: past 9999 by its magnitude alone
        "1" + "0" * 12,
        "9" * 60 + ".5",
        "+" + "9" * 40,
        Decimal("1e999999999"),  # multiplying this out would take forever
        Decimal("9" * 5000),
        Decimal("253402300800"),
        10**4000,  # compared, never multiplied
        1e300,
        -(10**4000),
        Decimal("-1e999999999"),
        "-" + "9" * 60,
    ],
)
def test_numbers_too_big_are_refused_by_magnitude(value: object) -> None:
    with pytest.raises(ValidationError) as info:
        parse_at(value)
    assert info.value.field == "at"
    assert "1970" in info.value.message


@pytest.mark.parametrize(
    "value", ["-" + "9" * 60, -(10**4000), Decimal("-1e999999999"), -1e300, "-" + "9" * 13]
)
def test_huge_negative_numbers_are_already_due_with_past_ok(value: object) -> None:
    assert parse_at(value, past_ok=True) == 0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0" * 40 + "1704067200", NEW_YEAR_2024_MS),  # leading zeros carry no magnitude
        ("253402300799.999", MAX_DUE_MS),  # 12 digits: the largest magnitude allowed
        (Decimal("1e-999999999"), 1),  # a sliver of a second past the epoch: 1 ms
        (Decimal("-1e-999999999"), 0),
        (Decimal("1." + "0" * 1000 + "1"), 1001),
        # Past the 28 digits of Decimal's default context: still exact, still rounded up.
        ("1.0000000000000000000000000000000001", 1001),
        (Decimal("1.0000000000000000000000000000000001"), 1001),
        ("-0.0001", 0),  # rounds up to the epoch itself
    ],
)
def test_exact_conversion_of_numbers_within_range(value: object, expected: int) -> None:
    assert parse_at(value) == expected


ARABIC_INDIC, EXTENDED_ARABIC_INDIC, FULLWIDTH, DEVANAGARI = 0x0660, 0x06F0, 0xFF10, 0x0966


def in_script(text: str, zero: int, only: slice = slice(None)) -> str:
    """``text`` with the ASCII digits in ``only`` written in another script's digits
    (all of them Unicode decimal digits: what ``\\d`` and ``int()`` accept)."""
    chars = list(text)
    for index in range(len(chars))[only]:
        if chars[index] in "0123456789":
            chars[index] = chr(zero + int(chars[index]))
    return "".join(chars)


@pytest.mark.parametrize(
    "text",
    [
        in_script("1704067200", ARABIC_INDIC),
        in_script("1704067200", EXTENDED_ARABIC_INDIC),
        in_script("1704067200", FULLWIDTH),
        in_script("1704067200.5", FULLWIDTH, slice(-1, None)),
        in_script("2024-01-01T00:00:00Z", DEVANAGARI, slice(0, 4)),
        "2024-01-01T00:00:00\u00a0",  # a no-break space
    ],
)
def test_only_ascii_digits_are_digits(text: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_at(text)
    assert info.value.field == "at"
    assert "ASCII" in info.value.message


@pytest.mark.parametrize(
    "text",
    [
        in_script("5s", FULLWIDTH),
        in_script("1s", ARABIC_INDIC),
        in_script("10ms", ARABIC_INDIC, slice(1, 2)),
        in_script("1h30m", FULLWIDTH, slice(2, 3)),
        in_script("12", ARABIC_INDIC),
    ],
)
def test_durations_take_only_ascii_digits(text: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_duration_ms(text, field="delay")
    assert info.value.field == "delay"
    assert "ASCII" in info.value.message


@pytest.mark.parametrize(
    "value", ["20261201", " 20261201 ", "+20261201", 20261201, "10000000", 99_999_999]
)
def test_an_8_digit_integer_at_is_ambiguous_and_refused(value: object) -> None:
    for past_ok in (False, True):
        with pytest.raises(ValidationError) as info:
            parse_at(value, past_ok=past_ok)
        assert info.value.field == "at"
        assert "ambiguous" in info.value.message


def test_the_compact_date_refusal_names_both_readings_and_how_to_write_each() -> None:
    with pytest.raises(ValidationError) as info:
        parse_at("20261201")
    message = info.value.message
    assert "1970-08-23T12:06:41Z" in message  # as epoch seconds
    assert "2026-12-01" in message  # as a date
    assert "'2026-12-01'" in message  # how to write the date
    assert "20261201.0" in message  # how to write the seconds
    # ... and both spellings do work:
    assert parse_at("2026-12-01") == parse_at(datetime(2026, 12, 1))
    assert parse_at("20261201.0") == parse_at(20261201.0) == 20_261_201_000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (9_999_999, 9_999_999_000),  # 7 digits: only epoch seconds
        ("9999999", 9_999_999_000),
        (100_000_000, 100_000_000_000),  # 9 digits: only epoch seconds
        ("020261201", 20_261_201_000),  # 9 characters
        ("20261201.", 20_261_201_000),  # a point: a number, not a date
        (20261201.0, 20_261_201_000),
        (Decimal("20261201.0"), 20_261_201_000),
        ("20261201T000000Z", 1_796_083_200_000),  # compact ISO with a time: a date
    ],
)
def test_numbers_that_are_not_8_digit_integers_are_accepted(value: object, expected: int) -> None:
    assert parse_at(value) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-01-01T00:00:00.0010000001Z", NEW_YEAR_2024_MS + 2),  # past the µs: up
        ("2024-01-01T00:00:00.0009999999Z", NEW_YEAR_2024_MS + 1),
        ("2024-01-01T00:00:00.0010000000Z", NEW_YEAR_2024_MS + 1),  # zeros: exact
        ("2024-01-01T00:00:00,0010000001", NEW_YEAR_2024_MS + 2),
    ],
)
def test_iso_digits_past_the_microsecond_round_up(text: str, expected: int) -> None:
    assert parse_at(text) == expected


def test_iso_rounding_up_past_year_9999_is_out_of_range_not_an_overflow() -> None:
    with pytest.raises(ValidationError) as info:
        parse_at("9999-12-31T23:59:59.9999991Z")
    assert "1970" in info.value.message


@pytest.mark.parametrize(
    "text",
    [
        "1" + "0" * 20 + "ms",  # checked by its digits before being converted
        "9" * 13,  # bare seconds
        "253402300800s",
        "2932897d",
        "2932896d" + "1d",  # each part fits, the sum does not
    ],
)
def test_durations_longer_than_any_due_time_are_refused(text: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_duration_ms(text)
    assert info.value.field == "in"
    assert "at most" in info.value.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("253402300799999ms", MAX_DURATION_MS),
        ("1.0000000000000000000000000000000001ms", 2),  # exact past 28 digits: up
        ("0" * 30 + "5s", 5000),
        ("1d" * 20, 20 * 86_400_000),
    ],
)
def test_long_but_valid_durations(text: str, expected: int) -> None:
    assert parse_duration_ms(text) == expected


def test_bare_negative_duration_is_negative_whatever_its_size() -> None:
    with pytest.raises(ValidationError, match="negative"):
        parse_duration_ms("-" + "9" * 30)


@pytest.mark.parametrize(("at_ms", "delay_ms"), [(10**4000, None), (-(10**4000), None)])
def test_huge_at_ms_is_refused(at_ms: object, delay_ms: object) -> None:
    with pytest.raises(ValidationError) as info:
        due_from(None, at_ms, delay_ms, NOW)
    assert info.value.field == "at_ms"


@pytest.mark.parametrize("delay_ms", [10**4000, MAX_DURATION_MS + 1, -(10**4000)])
def test_huge_delay_ms_is_refused_before_any_arithmetic(delay_ms: int) -> None:
    with pytest.raises(ValidationError) as info:
        due_from(None, None, delay_ms, NOW)
    assert info.value.field == "delay_ms"
    assert len(str(info.value)) < 200


@pytest.mark.parametrize("value", [None, 5, b"5s", ["5s"]])
def test_a_duration_must_be_text(value: object) -> None:
    with pytest.raises(ValidationError) as info:
        parse_duration_ms(value)  # type: ignore[arg-type]
    assert info.value.field == "in"
