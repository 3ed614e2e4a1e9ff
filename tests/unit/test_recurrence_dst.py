"""The daylight-saving policy of a cron series (domain/recurrence.py,
docs/design/flow-control.md section 5).

``dst_repeated``: a matching local time shown twice (clocks back) fires at its
``first`` pass only, its ``last`` pass only, or ``both``. ``dst_skipped``:
the matching local times a gap skips (clocks forward) ``shift`` to the
instant the gap ends, once however many there were, or ``skip``: they do not
fire. Not given (None), each is Debian cron's rule by the kind of entry: a
minute or hour field starting with ``*`` follows elapsed time (``both``,
``skip``), any other entry names its times (``first``, ``shift``).

First examples in Europe/Berlin (2026-10-25: 03:00 CEST became 02:00 CET;
2026-03-29: 02:00 CET became 03:00 CEST), the API (make_recurrence) and the
stored record; then properties over every IANA zone whose UTC offset changes
in 2000-2040, with cron entries naming local times of a change's repeated
span or gap, against a minute-by-minute reference (:func:`reference`) that
applies the policy's definition to each minute, independently of the
module's search. Every instant is epoch ms (UTC).
"""

from __future__ import annotations

import functools
import json
import math
import time
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.zones import (
    EPOCH,
    MS,
    Change,
    elapsed,
    instant,
    is_zone,
    matcher,
    minutes_between,
    offset,
    shown,
)

from triggerhook.domain import recurrence
from triggerhook.domain.bounds import MAX_DUE_MS
from triggerhook.domain.meta import from_record as meta_from_record
from triggerhook.domain.meta import make_meta
from triggerhook.domain.recurrence import Recurrence, make_recurrence
from triggerhook.errors import ValidationError

MINUTE, HOUR, DAY = 60_000, 3_600_000, 86_400_000
REPEATED = ("first", "last", "both")
SKIPPED = ("shift", "skip")
POLICIES = [(repeated, skipped) for repeated in REPEATED for skipped in SKIPPED]

# A draw walks a few hours around one change and scans them minute by minute.
DST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def ms(text: str) -> int:
    """An RFC 3339 time (with its offset) as epoch ms, exactly."""
    return (datetime.fromisoformat(text) - EPOCH) // MS


def series(
    cron: str, zone: str = "Europe/Berlin", repeated: str | None = None, skipped: str | None = None
) -> Recurrence:
    made = make_recurrence(cron=cron, timezone=zone, dst_repeated=repeated, dst_skipped=skipped)
    assert made is not None
    return made


def walk(recur: Recurrence, start: int, until: int) -> list[int]:
    """The series started at ``start``: its occurrences up to ``until``, each
    confirmed on time; each must come after the one before (no loop)."""
    dues: list[int] = []
    due: int | None = recur.aligned_ms(start)
    assert due is not None and due >= start
    while due is not None and due <= until:
        assert not dues or due > dues[-1], (dues[-1], due)
        assert len(dues) <= (until - start) // MINUTE + 1
        dues.append(due)
        due = recur.next_ms(due, due)
    return dues


# --- examples in Europe/Berlin -----------------------------------------------------

BACK_NIGHT = (ms("2026-10-24T12:00:00+00:00"), ms("2026-10-26T12:00:00+00:00"))
FORWARD_NIGHT = (ms("2026-03-28T12:00:00+00:00"), ms("2026-03-30T12:00:00+00:00"))
CEST_0230 = ms("2026-10-25T00:30:00+00:00")  # 02:30 +02:00, the first pass
CET_0230 = ms("2026-10-25T01:30:00+00:00")  # 02:30 +01:00, the second pass
NEXT_0230 = ms("2026-10-26T01:30:00+00:00")  # the next night's (+01:00)


@pytest.mark.parametrize("skipped", [None, *SKIPPED])
@pytest.mark.parametrize(
    ("repeated", "night"),
    [
        (None, [CEST_0230]),  # a named time: the first pass
        ("first", [CEST_0230]),
        ("last", [CET_0230]),
        ("both", [CEST_0230, CET_0230]),
    ],
)
def test_a_named_time_in_the_repeated_hour(
    repeated: str | None, night: list[int], skipped: str | None
) -> None:
    recur = series("30 2 * * *", repeated=repeated, skipped=skipped)
    assert walk(recur, *BACK_NIGHT) == [*night, NEXT_0230]


@pytest.mark.parametrize(
    ("repeated", "local"),
    [
        (None, ["02:00+02", "02:30+02", "02:00+01", "02:30+01"]),  # elapsed time: both
        ("both", ["02:00+02", "02:30+02", "02:00+01", "02:30+01"]),
        ("first", ["02:00+02", "02:30+02"]),
        ("last", ["02:00+01", "02:30+01"]),
    ],
)
def test_an_elapsed_time_entry_in_the_repeated_hour(repeated: str | None, local: list[str]) -> None:
    recur = series("*/30 * * * *", repeated=repeated)
    dues = walk(recur, ms("2026-10-25T01:30:00+02:00"), ms("2026-10-25T03:00:00+01:00"))
    expected = [ms(f"2026-10-25T{t}:00") for t in local]
    assert dues == [
        ms("2026-10-25T01:30:00+02:00"),
        *expected,
        ms("2026-10-25T03:00:00+01:00"),
    ]


@pytest.mark.parametrize("repeated", [None, *REPEATED])
@pytest.mark.parametrize(
    ("cron", "skipped", "that_day"),
    [
        ("30 2 * * *", None, ["03:00"]),  # a named time: shift
        ("30 2 * * *", "shift", ["03:00"]),
        ("30 2 * * *", "skip", []),
        ("15,45 2 * * *", "shift", ["03:00"]),  # two in the gap: one occurrence
        ("15,45 2 * * *", "skip", []),
        ("0,30 2,3 * * *", "shift", ["03:00", "03:30"]),  # 03:00 matches too: once
        ("0,30 2,3 * * *", "skip", ["03:00", "03:30"]),
        ("*/20 2 * * *", None, []),  # elapsed time: skip
        ("*/20 2 * * *", "shift", ["03:00"]),
        ("*/20 2 * * *", "skip", []),
    ],
)
def test_times_in_the_gap(
    cron: str, skipped: str | None, that_day: list[str], repeated: str | None
) -> None:
    recur = series(cron, repeated=repeated, skipped=skipped)
    dues = walk(recur, *FORWARD_NIGHT)
    noon = ms("2026-03-29T12:00:00+00:00")
    assert [d for d in dues if d < noon] == [ms(f"2026-03-29T{t}:00+02:00") for t in that_day]
    next_day = [d for d in dues if d >= noon]  # 02:xx CEST: the next night's are back
    assert ms("2026-03-30T02:00:00+02:00") <= next_day[0] < ms("2026-03-30T03:00:00+02:00")


def test_last_confirmed_in_the_first_pass_fires_the_second_pass_still_ahead() -> None:
    """The first pass's 02:30 (CEST) is no occurrence of ``last``: confirmed
    anywhere before the second pass's (02:30 CET), that one comes next, once;
    confirmed after it, the next night's."""
    recur = series("30 2 * * *", repeated="last")
    yesterday = ms("2026-10-24T00:30:00+00:00")
    for now in (ms("2026-10-25T02:20:00+02:00"), ms("2026-10-25T02:40:00+02:00")):
        assert recur.next_ms(yesterday, now) == CET_0230
        assert recur.aligned_ms(now) == recur.first_ms(now) == CET_0230
    assert recur.next_ms(yesterday, ms("2026-10-25T02:20:00+01:00")) == CET_0230
    assert recur.next_ms(yesterday, ms("2026-10-25T02:40:00+01:00")) == NEXT_0230
    assert recur.next_ms(CET_0230, CET_0230 + 100) == NEXT_0230
    assert recur.aligned_ms(CET_0230) == CET_0230
    assert recur.aligned_ms(CET_0230 + 1) == NEXT_0230
    # Two named times: confirmed at 02:40 CEST, both second passes are ahead.
    two = series("0,30 2 * * *", repeated="last")
    now = ms("2026-10-25T02:40:00+02:00")
    first = two.next_ms(yesterday, now)
    assert first == ms("2026-10-25T02:00:00+01:00")
    assert two.next_ms(first, first) == CET_0230
    assert two.next_ms(CET_0230, CET_0230) == ms("2026-10-26T02:00:00+01:00")


def test_both_and_first_confirmed_in_a_pass() -> None:
    both = series("30 2 * * *", repeated="both")
    # The first pass's fired, confirmed later in it: the second pass's still comes.
    assert both.next_ms(CEST_0230, ms("2026-10-25T02:40:00+02:00")) == CET_0230
    # Started in the second pass, before its 02:30: that one.
    assert both.aligned_ms(ms("2026-10-25T02:10:00+01:00")) == CET_0230
    # first (issue 29): in the second pass the night's times have passed.
    first = series("30 2 * * *", repeated="first")
    assert first.next_ms(CEST_0230, ms("2026-10-25T02:10:00+01:00")) == NEXT_0230
    assert first.aligned_ms(ms("2026-10-25T02:10:00+01:00")) == NEXT_0230


def test_a_time_only_ever_in_a_gap() -> None:
    """02:xx on the last Sunday of March never happens in Berlin: skip ends
    the series after a bounded search (as for no match), shift fires at 03:00
    CEST, for either kind of entry."""
    at = ms("2027-01-01T00:00:00+00:00")
    started = time.perf_counter()
    assert series("30 2 * 3 0L", skipped="skip").aligned_ms(at) == MAX_DUE_MS + 1
    assert series("* 2 * 3 0L", repeated="last").next_ms(at, at) is None  # skip: its default
    assert time.perf_counter() - started < 5  # the search is bounded (about 0.3 s each)
    for cron in ("30 2 * 3 0L", "* 2 * 3 0L"):
        for repeated in (None, *REPEATED):
            shift = series(cron, repeated=repeated, skipped="shift")
            assert shift.aligned_ms(at) == ms("2027-03-28T03:00:00+02:00")
            assert shift.next_ms(ms("2027-03-28T03:00:00+02:00"), at) == ms(
                "2028-03-26T03:00:00+02:00"
            )


def test_a_30_minute_change_by_policy() -> None:
    """Australia/Lord_Howe, 2027-04-04: 02:00 +11 became 01:30 +10:30."""
    zone = "Australia/Lord_Howe"
    start, until = ms("2027-04-04T01:00:00+11:00"), ms("2027-04-04T03:00:00+10:30")
    by_policy = {r: walk(series("45 1 * * *", zone, r), start, until) for r in REPEATED}
    assert by_policy == {
        "first": [ms("2027-04-04T01:45:00+11:00")],
        "last": [ms("2027-04-04T01:45:00+10:30")],
        "both": [ms("2027-04-04T01:45:00+11:00"), ms("2027-04-04T01:45:00+10:30")],
    }


# --- make_recurrence and the record ------------------------------------------------


@pytest.mark.parametrize(("repeated", "skipped"), [*POLICIES, ("last", None), (None, "skip")])
def test_make_recurrence_keeps_the_policy(repeated: str | None, skipped: str | None) -> None:
    made = make_recurrence(
        cron="30 2 * * *", timezone="Europe/Berlin", dst_repeated=repeated, dst_skipped=skipped
    )
    assert made == Recurrence(
        cron="30 2 * * *",
        timezone="Europe/Berlin",
        dst_repeated=repeated,  # type: ignore[arg-type]
        dst_skipped=skipped,  # type: ignore[arg-type]
    )


def test_make_recurrence_keeps_a_plain_value() -> None:
    class Text(str):
        __slots__ = ()

    made = make_recurrence(cron="* * * * *", dst_repeated=Text("last"), dst_skipped=Text("skip"))
    assert made is not None
    assert (made.dst_repeated, made.dst_skipped) == ("last", "skip")
    assert {type(made.dst_repeated), type(made.dst_skipped)} == {str}  # not the subclass


BAD_VALUES: list[object] = [
    "",
    "First",
    "LAST",
    " both",
    "both ",
    "first,last",
    "yes",
    0,
    1,
    True,
    False,
    1.5,
    ["first"],
    {"first": True},
    b"first",
]


@pytest.mark.parametrize("value", [*BAD_VALUES, "shift", "skip"])
def test_make_recurrence_refuses_a_repeated_policy(value: object) -> None:
    with pytest.raises(ValidationError) as info:
        make_recurrence(cron="30 2 * * *", dst_repeated=value)
    assert info.value.field == "dst_repeated"
    assert info.value.message == "must be one of first, last, both"


@pytest.mark.parametrize("value", [*BAD_VALUES, "first", "last", "both"])
def test_make_recurrence_refuses_a_skipped_policy(value: object) -> None:
    with pytest.raises(ValidationError) as info:
        make_recurrence(cron="30 2 * * *", dst_skipped=value)
    assert info.value.field == "dst_skipped"
    assert info.value.message == "must be one of shift, skip"


@pytest.mark.parametrize("field", ["dst_repeated", "dst_skipped"])
@pytest.mark.parametrize("value", ["first", "skip", "nonsense"])
def test_a_policy_only_with_cron(field: str, value: str) -> None:
    for fields in ({"every": "PT1H"}, {"every": 60_000, "until_ms": 5}, {}):
        with pytest.raises(ValidationError) as info:
            make_recurrence(**fields, **{field: value})  # type: ignore[arg-type]
        assert info.value.field == field
        assert info.value.message.startswith("only with cron")


def test_record_of_a_policy() -> None:
    recur = Recurrence(
        cron="30 2 * * *", timezone="Europe/Berlin", dst_repeated="last", dst_skipped="skip"
    )
    assert recur.to_record() == {
        "n": 1,
        "cron": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "dst_repeated": "last",
        "dst_skipped": "skip",
    }
    assert Recurrence(cron="* * * * *", dst_skipped="shift").to_record() == {
        "n": 1,
        "cron": "* * * * *",
        "timezone": "UTC",
        "dst_skipped": "shift",
    }
    for made in (recur, Recurrence(cron="* * * * *", dst_repeated="both", occurrence=4)):
        kept = json.loads(json.dumps(made.to_record()))
        assert recurrence.from_record(kept) == made
        meta = make_meta(recur=made)
        assert meta_from_record(json.loads(json.dumps(meta.to_record()))) == meta


def test_record_without_a_policy_is_as_before() -> None:
    """A series without a policy is stored as before the policy existed, and
    a record from before reads back without one."""
    recur = Recurrence(cron="30 2 * * *", timezone="Europe/Berlin", until_ms=5, occurrence=3)
    text = '{"n": 3, "cron": "30 2 * * *", "timezone": "Europe/Berlin", "until_ms": 5}'
    assert json.dumps(recur.to_record()) == text
    read = recurrence.from_record(json.loads(text))
    assert read == recur
    assert (read.dst_repeated, read.dst_skipped) == (None, None)


@pytest.mark.parametrize(
    ("field", "record"),
    [
        ("dst_repeated", {"cron": "* * * * *", "timezone": "UTC", "dst_repeated": "sometimes"}),
        ("dst_repeated", {"cron": "* * * * *", "timezone": "UTC", "dst_repeated": 1}),
        ("dst_repeated", {"cron": "* * * * *", "timezone": "UTC", "dst_repeated": "skip"}),
        ("dst_skipped", {"cron": "* * * * *", "timezone": "UTC", "dst_skipped": "Shift"}),
        ("dst_skipped", {"cron": "* * * * *", "timezone": "UTC", "dst_skipped": ["skip"]}),
        ("dst_skipped", {"every_ms": 1000, "dst_skipped": "skip"}),
        ("dst_repeated", {"every_ms": 1000, "dst_repeated": "first"}),
    ],
)
def test_from_record_refuses_a_bad_policy(field: str, record: dict[str, object]) -> None:
    with pytest.raises(ValidationError) as info:
        recurrence.from_record({"n": 1, **record})
    assert info.value.field == field


# --- properties: the zones' changes, found once -------------------------------------

YEARS = (2000, 2041)
COARSE = 182 * DAY  # which zones change at all: a zone whose offset differs half a year on
FINE = 7 * DAY  # a drawn zone's changes: a pair closer than this is missed
ISOLATED = 4 * DAY  # a change drawn has no other this near (the walks stay within 2 days)


def year_ms(year: int) -> int:
    return (datetime(year, 1, 1, tzinfo=UTC) - EPOCH) // MS


def sampled_changes(zone: ZoneInfo, step: int) -> Iterator[tuple[int, timedelta, timedelta]]:
    """The changes found sampling every ``step`` ms in YEARS, bisected to the ms."""
    for sample in range(year_ms(YEARS[0]), year_ms(YEARS[1]), step):
        lo, hi = sample, sample + step
        after = offset(hi, zone)
        if offset(lo, zone) == after:
            continue
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if offset(mid, zone) == after else (mid, hi)
        yield hi, offset(lo, zone), after


@functools.cache
def changing_zones() -> tuple[str, ...]:
    """The accepted zones whose offset changes in YEARS (about 0.1 s, once)."""
    names = sorted(n for n in zoneinfo.available_timezones() if is_zone(n))
    return tuple(n for n in names if next(sampled_changes(ZoneInfo(n), COARSE), None))


@functools.cache
def changes_of(name: str) -> tuple[Change, ...]:
    """A zone's changes the reference can follow: on a whole minute, by whole
    minutes, at most a day, no other change near."""
    found = list(sampled_changes(ZoneInfo(name), FINE))
    kept = []
    for k, (at, before, after) in enumerate(found):
        near = [t for t, _, _ in found[max(k - 1, 0) : k + 2] if t != at]
        if (
            at % MINUTE == 0
            and not (before - after) % timedelta(minutes=1)
            and abs(before - after) <= timedelta(days=1)
            and all(abs(t - at) > ISOLATED for t in near)
        ):
            kept.append(Change(name, at, before, after))
    return tuple(kept)


def changes(repeats: bool | None = None) -> st.SearchStrategy[Change]:
    """A zone with a change (each zone as likely), then one of its changes."""

    def of(name: str) -> st.SearchStrategy[Change]:
        kept = [c for c in changes_of(name) if repeats is None or c.repeats == repeats]
        return st.sampled_from(kept) if kept else st.nothing()

    return st.deferred(lambda: st.sampled_from(changing_zones()).flatmap(of))


# --- the reference ------------------------------------------------------------------


def effective(cron: str, repeated: str | None, skipped: str | None) -> tuple[str, str]:
    """The policy a series follows: the one given, else the default by kind."""
    if elapsed(cron):
        return repeated or "both", skipped or "skip"
    return repeated or "first", skipped or "shift"


def reference(
    cron: str, name: str, after: int, until: int, repeated: str, skipped: str
) -> list[int]:
    """The occurrences due in (after, until], minute by minute, by the
    policy's definition: a minute whose local time matches fires if the clocks
    show that time once, or this is a pass the policy fires (fold 0: the
    first, 1: the second); a minute at which a gap ends fires if ``shift``
    and a local time the gap skipped matches."""
    zone, matches = ZoneInfo(name), matcher(cron)
    folds = {"first": {0}, "last": {1}, "both": {0, 1}}[repeated]
    found = []
    for at in range(after - after % MINUTE + MINUTE, until + 1, MINUTE):
        local = shown(at, zone)
        passes = {fold for fold in (0, 1) if instant(local, zone, fold) == at}
        hit = matches(local) and (len(passes) == 2 or bool(passes & folds))
        if not hit and skipped == "shift" and offset(at - 1, zone) < offset(at, zone):
            gap = minutes_between(shown(at - 1, zone), local - timedelta(minutes=1))
            hit = any(matches(t) for t in gap)
        if hit:
            found.append(at)
    return found


# --- the cases drawn ----------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A change, a cron entry naming local times at or near its span, a policy
    (None: not given)."""

    change: Change
    cron: str
    repeated: str | None
    skipped: str | None

    @property
    def policy(self) -> tuple[str, str]:
        return effective(self.cron, self.repeated, self.skipped)

    def series(self) -> Recurrence:
        return series(self.cron, self.change.zone, self.repeated, self.skipped)


def cron_forms(local: datetime, other: int, step: int) -> list[str]:
    """Entries matching ``local``, most naming it, some following elapsed time."""
    m, h = local.minute, local.hour
    return [
        f"{m} {h} * * *",
        f"{','.join(str(x) for x in sorted({m, other}))} {h} * * *",
        f"{m} {h},{(h + 1) % 24} * * *",
        f"{m}-{min(m + step, 59)} {h} * * *",
        f"{m} {h} {local.day} * *",
        f"* {h} * * *",
        f"{m} * * * *",
        f"*/{step} {h} * * *",
    ]


@st.composite
def cases(draw: st.DrawFn, repeats: bool | None = None, policies: bool = True) -> Case:
    """A change (``repeats``: True clocks back, False forward, None either),
    an entry and a policy: each of the two given or not (``policies`` False:
    neither)."""
    change = draw(changes(repeats))
    minutes = change.span_ms // MINUTE
    local = change.span_start + timedelta(minutes=draw(st.integers(-30, minutes + 30)))
    forms = cron_forms(local, draw(st.integers(0, 59)), draw(st.sampled_from([2, 5, 15, 20, 30])))
    cron = draw(st.sampled_from(forms))
    repeated: str | None = None
    skipped: str | None = None
    if policies:
        repeated = draw(st.sampled_from([None, *REPEATED]))
        skipped = draw(st.sampled_from([None, *SKIPPED]))
    return Case(change, cron, repeated, skipped)


BERLIN_BACK = Change(
    "Europe/Berlin", ms("2026-10-25T01:00:00+00:00"), timedelta(hours=2), timedelta(hours=1)
)
BERLIN_FORWARD = Change(
    "Europe/Berlin", ms("2026-03-29T01:00:00+00:00"), timedelta(hours=1), timedelta(hours=2)
)
LORD_HOWE_BACK = Change(
    "Australia/Lord_Howe",
    ms("2027-04-03T15:00:00+00:00"),
    timedelta(hours=11),
    timedelta(hours=10, minutes=30),
)


# --- the properties -----------------------------------------------------------------


def walk_and_compare(case: Case, lead: int) -> list[int]:
    """Started before the change and confirmed on time: the occurrences
    (strictly increasing, see walk) are the reference's."""
    change, (repeated, skipped) = case.change, case.policy
    start = change.at_ms - change.span_ms - lead * MINUTE
    until = change.at_ms + change.span_ms + 3 * HOUR
    dues = walk(case.series(), start, until)
    assert dues == reference(case.cron, change.zone, start - 1, until, repeated, skipped)
    return dues


def span_minutes(change: Change) -> Iterator[datetime]:
    """The whole minutes a change repeats, or its gap skips."""
    first = change.span_start
    return minutes_between(first - timedelta(minutes=1), first + (change.span_ms - MINUTE) * MS)


@DST
@given(case=cases(repeats=True), lead=st.integers(1, 180))
@example(case=Case(BERLIN_BACK, "30 2 * * *", "last", "skip"), lead=60)
@example(case=Case(BERLIN_BACK, "0,30 2 * * *", "both", None), lead=1)
@example(case=Case(LORD_HOWE_BACK, "* 1 * * *", "last", None), lead=10)
def test_a_walk_through_a_repeated_span(case: Case, lead: int) -> None:
    """Each matching local time of the span fires at the passes the policy
    names, exactly: ``both`` twice, ``first`` and ``last`` once, at fold 0's
    instant or fold 1's."""
    dues = walk_and_compare(case, lead)
    zone, matches = ZoneInfo(case.change.zone), matcher(case.cron)
    passes = {"first": [0], "last": [1], "both": [0, 1]}[case.policy[0]]
    for local in span_minutes(case.change):
        if matches(local):
            at = [instant(local, zone, fold) for fold in (0, 1)]
            assert [fold for fold in (0, 1) if at[fold] in dues] == passes, local
            assert sum(shown(due, zone) == local for due in dues) == len(passes)


@DST
@given(case=cases(repeats=False), lead=st.integers(1, 180))
@example(case=Case(BERLIN_FORWARD, "15,45 2 * * *", "last", None), lead=30)
@example(case=Case(BERLIN_FORWARD, "*/20 2 * * *", None, "shift"), lead=30)
@example(case=Case(BERLIN_FORWARD, "30 2 * * *", "first", "skip"), lead=30)
def test_a_walk_through_a_gap(case: Case, lead: int) -> None:
    """A local time the gap skips: ``shift`` fires once at the instant the gap
    ends, however many matched; ``skip`` never fires for it: every
    occurrence's own local time matches, but a shifted one's."""
    dues = walk_and_compare(case, lead)
    change, shift = case.change, case.policy[1] == "shift"
    zone, matches = ZoneInfo(change.zone), matcher(case.cron)
    in_gap = any(matches(local) for local in span_minutes(change))
    at_end = matches(shown(change.at_ms, zone))
    assert dues.count(change.at_ms) == (at_end or (in_gap and shift))
    for due in dues:
        assert matches(shown(due, zone)) or (due == change.at_ms and shift)


@DST
@given(
    case=cases(),
    moment=st.integers(-26 * 60, 27 * 60),
    part=st.sampled_from([0, 0, 1, -1, 500, 59_999]),
    lag=st.integers(-60, 4 * 60),
    late=st.floats(0, 1, exclude_max=True),
)
@example(case=Case(BERLIN_BACK, "30 2 * * *", "last", None), moment=-20, part=0, lag=0, late=0.0)
@example(case=Case(BERLIN_BACK, "30 2 * * *", "first", None), moment=10, part=0, lag=0, late=0.0)
def test_the_next_occurrence_after_a_due_time_and_now(
    case: Case, moment: int, part: int, lag: int, late: float
) -> None:
    """``due`` anywhere near the change (either pass of a repeated span),
    ``now`` the confirmation's: the next is the reference's first strictly
    after both; a series started at ``due``, the first at or after it."""
    change, (repeated, skipped) = case.change, case.policy
    recur = case.series()
    due = change.at_ms + moment * MINUTE + part
    now = due + lag * MINUTE + late
    window = 8 * HOUR

    def first_after(after: int) -> int | None:
        found = reference(case.cron, change.zone, after, after + window, repeated, skipped)
        return found[0] if found else None

    nxt = recur.next_ms(due, now)
    after = max(due, math.floor(now))
    assert nxt is None or nxt > max(due, now)
    expected = first_after(after)
    if expected is not None:
        assert nxt == expected
    else:
        assert nxt is None or nxt > after + window
    aligned = recur.aligned_ms(due)
    expected = first_after(due - 1)
    assert aligned >= due
    if expected is not None:
        assert aligned == expected
    else:
        assert aligned > due - 1 + window
    assert recur.first_ms(now) == recur.aligned_ms(math.ceil(now))


@settings(DST, max_examples=40)
@given(case=cases(policies=False), moments=st.lists(st.integers(-26 * 60, 27 * 60), max_size=6))
@example(case=Case(BERLIN_BACK, "*/30 * * * *", None, None), moments=[60, 90])
def test_no_policy_is_the_default_by_kind(case: Case, moments: list[int]) -> None:
    """None is Debian cron's rule: first and shift for an entry naming its
    times, both and skip for one following elapsed time; given one policy of
    two, the other is the default."""
    change, cron = case.change, case.cron
    repeated, skipped = ("both", "skip") if elapsed(cron) else ("first", "shift")
    unset = case.series()
    assert (unset.dst_repeated, unset.dst_skipped) == (None, None)
    same = [
        series(cron, change.zone, repeated, skipped),
        series(cron, change.zone, repeated, None),
        series(cron, change.zone, None, skipped),
    ]
    start = change.at_ms - change.span_ms - HOUR
    dues = walk(unset, start, change.at_ms + change.span_ms + 2 * HOUR)
    for at in [change.at_ms + m * MINUTE for m in moments] + dues[:20]:
        for explicit in same:
            assert explicit.next_ms(at, at) == unset.next_ms(at, at)
            assert explicit.aligned_ms(at) == unset.aligned_ms(at)
