"""Property-based tests of the time parser every interface uses.

Invariants: whatever it is given, it returns a due time within 1970-9999 or
raises ValidationError, and nothing else; what it accepts it converts exactly
(never early); and its cost is linear in the size of its input, so no single
request can freeze the process.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.cost import MAX_RATIO, cost_ratio

from triggerhook.domain.task import MAX_DUE_MS, MIN_DUE_MS
from triggerhook.domain.timeparse import (
    MAX_DURATION_MS,
    due_from,
    parse_at,
    parse_duration_ms,
    seconds_to_ms,
)
from triggerhook.errors import ValidationError

NOW_MS = 1_700_000_000_000.5

# Text that looks like what the parser reads: digits (ASCII and others), signs,
# points, ISO separators, units, whitespace.
_TIME_ALPHABET = "0123456789+-.:,TZ tzWmshd\u0660\u06f1\uff10\u0966\u00a0e"
time_like_text = st.text(alphabet=_TIME_ALPHABET, max_size=80)
number_text = st.from_regex(r"[ ]?[+-]?[0-9]{1,40}(\.[0-9]{0,40})?[ ]?", fullmatch=True)
iso_text = st.builds(
    lambda moment, digits, offset: f"{moment.isoformat(timespec='seconds')}.{digits}{offset}",
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    st.text(alphabet="0123456789", min_size=1, max_size=20),
    st.sampled_from(["", "Z", "+00:00", "+05:30", "-12:00", "+14:00"]),
)
big_ints = st.integers(min_value=-(10**4300), max_value=10**4300)
offsets = st.timedeltas(min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23))
any_at = st.one_of(
    st.text(max_size=100),
    time_like_text,
    number_text,
    iso_text,
    st.integers(),
    big_ints,
    st.floats(allow_nan=True, allow_infinity=True),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.builds(Decimal, number_text.map(str.strip)),
    st.datetimes(),
    st.builds(
        lambda moment, offset: moment.replace(tzinfo=timezone(offset)), st.datetimes(), offsets
    ),
    st.none(),
    st.booleans(),
    st.binary(max_size=20),
    st.lists(st.integers(), max_size=3),
)


def _accepted_or_validation_error(parse: Callable[[], int], low: int, high: int) -> None:
    try:
        result = parse()
    except ValidationError as exc:
        assert exc.field, "an error must name its field"
        assert len(str(exc)) < 600, "an error must not echo a long input"
        return
    assert isinstance(result, int)
    assert low <= result <= high


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(value=any_at, past_ok=st.booleans())
@example(value="9" * 300_000, past_ok=False)
@example(value="20261201", past_ok=True)
@example(value=Decimal("1e999999999"), past_ok=False)
@example(value=Decimal("-1e-999999999"), past_ok=True)
@example(value="9999-12-31T23:59:59.9999999", past_ok=False)
def test_parse_at_returns_a_due_time_or_raises_validation_error(
    value: object, past_ok: bool
) -> None:
    _accepted_or_validation_error(
        lambda: parse_at(value, "at", past_ok=past_ok), MIN_DUE_MS, MAX_DUE_MS
    )


@settings(max_examples=300)
@given(value=st.one_of(st.integers(), big_ints, st.floats(), st.decimals(), st.text(max_size=80)))
def test_seconds_to_ms_returns_a_due_time_or_raises_validation_error(value: object) -> None:
    _accepted_or_validation_error(
        lambda: seconds_to_ms(value, "at"),  # type: ignore[arg-type]
        MIN_DUE_MS,
        MAX_DUE_MS,
    )


duration_text = st.from_regex(
    r"([0-9]{1,20}(\.[0-9]{1,20})?(ms|s|m|h|d|MS|S|H)){1,4}", fullmatch=True
)


@settings(max_examples=400)
@given(text=st.one_of(st.text(max_size=100), time_like_text, duration_text, number_text))
@example(text="9" * 300_000 + "s")
def test_parse_duration_returns_a_duration_or_raises_validation_error(text: str) -> None:
    _accepted_or_validation_error(lambda: parse_duration_ms(text, "in"), 0, MAX_DURATION_MS)


@settings(max_examples=300)
@given(
    at_ms=st.one_of(st.none(), big_ints, st.integers(), st.floats(), st.text(max_size=5)),
    delay_ms=st.one_of(st.none(), big_ints, st.integers(), st.booleans()),
)
def test_due_from_returns_a_due_time_or_raises_validation_error(
    at_ms: object, delay_ms: object
) -> None:
    _accepted_or_validation_error(
        lambda: due_from(None, at_ms, delay_ms, NOW_MS), MIN_DUE_MS, MAX_DUE_MS
    )


# -- what is accepted is exact: never early, at most one millisecond late -------------


@settings(max_examples=400)
@given(text=number_text)
def test_epoch_seconds_as_text_round_up_exactly(text: str) -> None:
    stripped = text.strip()
    is_compact_date = "." not in stripped and len(stripped.lstrip("+")) == 8 and "-" not in text
    exact_ms = Fraction(stripped) * 1000
    expected = math.ceil(exact_ms)
    if is_compact_date or not MIN_DUE_MS <= expected <= MAX_DUE_MS:
        with pytest.raises(ValidationError):
            parse_at(text)
        return
    assert parse_at(text) == expected


@settings(max_examples=400)
@given(text=iso_text)
def test_iso_times_round_up_exactly(text: str) -> None:
    """The oracle: the whole seconds by datetime, the fraction (any number of
    digits, past the microseconds datetime keeps) as an exact Fraction."""
    head, _, tail = text.partition(".")
    digits = tail.rstrip("Z").split("+")[0].split("-")[0]
    offset = tail[len(digits) :]
    whole = datetime.fromisoformat(head + offset)
    if whole.tzinfo is None:
        whole = whole.replace(tzinfo=UTC)
    try:
        seconds = Fraction((whole - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(seconds=1))
    except OverflowError:
        return
    expected = math.ceil((seconds + Fraction(f"0.{digits}")) * 1000)
    if not MIN_DUE_MS <= expected <= MAX_DUE_MS:
        with pytest.raises(ValidationError):
            parse_at(text)
        return
    assert parse_at(text) == expected


@settings(max_examples=300)
@given(text=duration_text)
def test_durations_add_up_exactly(text: str) -> None:
    units = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    parts = re.findall(r"([0-9.]+)(ms|s|m|h|d)", text.lower())
    expected = math.ceil(sum(Fraction(number) * units[unit] for number, unit in parts))
    if expected > MAX_DURATION_MS or len(text) > 64:
        with pytest.raises(ValidationError):
            parse_duration_ms(text)
        return
    assert parse_duration_ms(text) == expected


# -- linear time ----------------------------------------------------------------------


# Text of about n characters, as any interface may receive it.
_TEXT_SHAPES: dict[str, Callable[[int], str]] = {
    "digits": lambda n: "9" * n,
    "negative digits": lambda n: "-" + "9" * n,
    "fraction digits": lambda n: "1." + "9" * n,
    "iso fraction": lambda n: "2024-01-01T00:00:00." + "1" * n + "Z",
    "spaces": lambda n: " " * n + "1",
    "non-ascii digits": lambda n: "\u0669" * n,
    "duration": lambda n: "9" * n + "s",
    "duration parts": lambda n: "1s" * (n // 2),
}
# Decimals of about n digits, as only the library can pass them.
_DECIMAL_SHAPES: dict[str, Callable[[int], Decimal]] = {
    "decimal digits": lambda n: Decimal("9" * n),
    "decimal fraction": lambda n: Decimal("1." + "0" * n + "1"),
}
_PARSERS: dict[str, Callable[[object], object]] = {
    "parse_at": lambda v: parse_at(v, "at", past_ok=True),
    "parse_duration_ms": parse_duration_ms,  # type: ignore[dict-item]
}
_CASES = [(parser, shape) for parser in _PARSERS for shape in _TEXT_SHAPES] + [
    ("parse_at", shape) for shape in _DECIMAL_SHAPES
]


@pytest.mark.parametrize("shape", sorted(_TEXT_SHAPES))
@pytest.mark.parametrize("parser", sorted(_PARSERS))
def test_huge_text_is_refused(shape: str, parser: str) -> None:
    for size in (10_000, 1_000_000):
        with pytest.raises(ValidationError):
            _PARSERS[parser](_TEXT_SHAPES[shape](size))


@pytest.mark.parametrize("size", [10_000, 1_000_000])
def test_huge_decimals_are_refused_by_magnitude(size: int) -> None:
    with pytest.raises(ValidationError):
        parse_at(_DECIMAL_SHAPES["decimal digits"](size))


@pytest.mark.parametrize(("parser", "shape"), _CASES)
def test_cost_grows_linearly_with_the_input(parser: str, shape: str) -> None:
    """Ten times the input may cost about ten times as much, never a hundred
    (quadratic). A best-of-7 ratio under 30 leaves room for a noisy machine;
    the quadratic parser this replaces measured about 100 here."""
    make: Callable[[int], object] = _TEXT_SHAPES.get(shape) or _DECIMAL_SHAPES[shape]
    ratio = cost_ratio(_PARSERS[parser], make, 40_000, (ValidationError,))
    assert ratio < MAX_RATIO, f"{parser}({shape}): 10x the input cost {ratio:.0f}x the time"
