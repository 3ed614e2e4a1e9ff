"""Calendar properties of a series (domain/recurrence.py) where the clocks
change (issue 29): every IANA zone whose UTC offset changes in 1990-2040,
cron expressions and ``every`` durations, at instants drawn near those
changes (not uniformly: so that repeated and skipped hours come up often).

The rules, as recurrence.py's docstring and docs/api.md state them:

* ``aligned_ms(at) >= at``, ``first_ms(now) >= now``;
* ``next_ms(due, now)`` is the first occurrence strictly after both (or
  None): a series' occurrences strictly increase;
* an entry whose minute or hour field starts with ``*`` follows elapsed
  time: it fires at each instant whose local time matches, in both passes of
  a repeated hour, never for a local time a gap skips;
* any other entry fires each matching local time once, the first time the
  clocks reach it: a repeated one at its first pass; one a gap skips at the
  instant the gap ends.

The reference (:func:`reference`) applies these rules minute by minute,
independently of the module's search (cronsim on local times, bisection for
the changes). Every instant is epoch ms (UTC).
"""

from __future__ import annotations

import functools
import math
import zoneinfo
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

from triggerhook.domain.bounds import MAX_DUE_MS
from triggerhook.domain.meta import next_occurrence
from triggerhook.domain.recurrence import Recurrence, make_recurrence
from triggerhook.domain.spec import TaskRules, TaskSpec, resolve

MINUTE, HOUR, DAY = 60_000, 3_600_000, 86_400_000
YEARS = (1990, 2041)  # the changes drawn from: past rules (midnight ones) and the POSIX rule's
# The offset is sampled this often to find the changes: a pair closer together
# is missed (6 of about 24,000: Asia/Gaza's week-long Ramadan breaks, Brazil 2000).
SAMPLE = 14 * DAY
WINDOW = 8 * HOUR  # compared with the reference after each drawn instant
LOOKBACK = 26 * 60  # minutes: longer than any repeated span (the local times before a start)

settings.register_profile(
    "calendar",
    max_examples=100,
    deadline=None,  # a draw compares hundreds of occurrences with a minute-by-minute scan
    suppress_health_check=[HealthCheck.too_slow],
)
CALENDAR = settings.get_profile("calendar")


# --- the zones' changes, found once --------------------------------------------------


def changes_of(name: str) -> list[Change]:
    """The zone's changes in YEARS: sampled, then bisected to the millisecond."""
    zone = ZoneInfo(name)
    start, end = ((datetime(y, 1, 1, tzinfo=UTC) - EPOCH) // MS for y in YEARS)
    found = []
    for sample in range(start, end, SAMPLE):
        lo, hi = sample, sample + SAMPLE
        before, after = offset(lo, zone), offset(hi, zone)
        if before == after:
            continue
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if offset(mid, zone) == after else (mid, hi)
        if (
            hi % MINUTE == 0
            and not before % timedelta(minutes=1)
            and not after % timedelta(minutes=1)
        ):
            found.append(Change(name, hi, before, after))  # whole minutes: the reference's grid
    return found


@functools.cache
def all_changes() -> dict[str, tuple[Change, ...]]:
    """Every accepted zone with a change in YEARS, and its changes (about 2 s, once)."""
    names = sorted(n for n in zoneinfo.available_timezones() if is_zone(n))
    table = {name: tuple(changes_of(name)) for name in names}
    return {name: found for name, found in table.items() if found}


def changes(repeats: bool | None = None) -> st.SearchStrategy[Change]:
    """A zone with a change, then one of its changes (each zone as likely)."""

    def of(name: str) -> st.SearchStrategy[Change]:
        kept = [c for c in all_changes()[name] if repeats is None or c.repeats == repeats]
        return st.sampled_from(kept) if kept else st.nothing()

    return st.deferred(lambda: st.sampled_from(sorted(all_changes())).flatmap(of))


def near(change: Change) -> st.SearchStrategy[int]:
    """An instant within four hours of a change, often on a whole minute or next to one."""
    minutes = st.integers(-4 * 60, 4 * 60)
    part = st.sampled_from([0, 0, 0, 1, -1, 500, 30_000, 59_999])
    return st.builds(lambda m, p: change.at_ms + m * MINUTE + p, minutes, part)


@st.composite
def moments(draw: st.DrawFn) -> tuple[str, int]:
    """A zone and an instant near one of its changes."""
    change = draw(changes())
    return change.zone, draw(near(change))


# --- cron expressions and durations -------------------------------------------------


def field(top: int, hot: list[int]) -> st.SearchStrategy[str]:
    """A minute or hour field: ``*``, a value, a range, a step, a list."""
    value = st.one_of(st.sampled_from(hot), st.integers(0, top))
    single = value.map(str)
    span = st.tuples(value, value).map(lambda p: f"{min(p)}-{max(p)}")
    step = st.tuples(st.one_of(st.just("*"), span), st.integers(2, 30)).map(step_text)
    listed = st.lists(st.one_of(single, span), min_size=2, max_size=3).map(",".join)
    return st.one_of(st.just("*"), single, span, step, listed)


def step_text(pair: tuple[str, int]) -> str:
    return f"{pair[0]}/{pair[1]}"


DAYS = st.sampled_from(["*", "*", "*", "*/2", "1-31", "2-30/2", "1-15,16-31"])
MONTHS = st.sampled_from(["*", "*", "*", "1-12", "jan-dec", "*/2", "MAR,APR,SEP,OCT,NOV"])
WEEKDAYS = st.sampled_from(["*", "*", "*", "0-6", "SUN", "sat,sun", "MON-FRI", "7", "*/2"])


def crons() -> st.SearchStrategy[str]:
    """5-field expressions: minutes and hours of every kind (the hours of the
    changes often), the day fields mostly ``*`` (a change's day matches)."""
    minute = field(59, [0, 15, 30, 45, 59])
    hour = field(23, [0, 1, 2, 3, 23])
    return st.tuples(minute, hour, DAYS, MONTHS, WEEKDAYS).map(" ".join)


def everies() -> st.SearchStrategy[int]:
    usual = [1000, 60_000, 15 * MINUTE, 30 * MINUTE, HOUR, DAY, 7 * DAY]
    return st.one_of(st.sampled_from(usual), st.integers(1000, 3 * DAY))


# --- the reference ------------------------------------------------------------------


def reference(cron: str, name: str, after: int, until: int) -> list[int]:
    """The occurrences due in (after, until], minute by minute: an elapsed-time
    entry at each minute whose local time matches; a fixed-time one at each
    minute that reaches, for the first time, a local time that matches (the
    minute itself, or one a gap just skipped)."""
    zone, matches, wildcard = ZoneInfo(name), matcher(cron), elapsed(cron)
    at = after - after % MINUTE + MINUTE
    reached = max(shown(at - k * MINUTE, zone) for k in range(1, LOOKBACK))
    found = []
    for ms in range(at, until + 1, MINUTE):
        local = shown(ms, zone)
        if wildcard:
            hit = matches(local)
        else:
            hit = any(matches(t) for t in minutes_between(reached, local))
        if hit:
            found.append(ms)
        reached = max(reached, local)
    return found


def series(cron: str, zone: str) -> Recurrence:
    made = make_recurrence(cron=cron, timezone=zone)
    assert made is not None
    return made


def occurrences(recur: Recurrence, at: int, until: int) -> list[int]:
    """The series started at ``at``: its occurrences up to ``until``, each
    confirmed on time; each must come after the one before (no loop)."""
    dues: list[int] = []
    due: int | None = recur.aligned_ms(at)
    while due is not None and due <= until:
        assert not dues or due > dues[-1], (dues[-1], due)
        assert len(dues) <= (until - at) // 1000 + 1  # every: at least 1 s apart
        dues.append(due)
        due = recur.next_ms(due, due)
    return dues


def ms(text: str) -> int:
    return (datetime.fromisoformat(text) - EPOCH) // MS


BERLIN_NIGHT = ms("2027-10-31T01:10:00+00:00")  # 02:10 CET: the second pass of 02:00-03:00
# 00:01 -03 became 23:01 -04 (cronsim gave 00:00 -03 after 00:00 -03: a loop).
GOOSE_BAY_BACK = Change(
    "America/Goose_Bay", ms("2002-10-27T03:01:00+00:00"), timedelta(hours=-3), timedelta(hours=-4)
)
# Saturday 00:00 -05 became 01:00 -04 (cronsim fired "* 0" at 01:00, entering the day at 00:00).
GUAYAQUIL_FORWARD = Change(
    "America/Guayaquil", ms("1992-11-28T05:00:00+00:00"), timedelta(hours=-5), timedelta(hours=-4)
)


# --- the properties -----------------------------------------------------------------


@CALENDAR
@given(moment=moments(), cron=crons(), late=st.floats(0, 1, exclude_max=True))
@example(moment=("Europe/Berlin", BERLIN_NIGHT), cron="30 2 * * *", late=0.0)
@example(moment=("Europe/Berlin", BERLIN_NIGHT), cron="30 0-3 * * *", late=0.0)
def test_a_series_never_starts_before_the_time_given(
    moment: tuple[str, int], cron: str, late: float
) -> None:
    zone, at = moment
    recur = series(cron, zone)
    first = recur.aligned_ms(at)
    assert first >= at
    expected = reference(cron, zone, at - 1, at - 1 + WINDOW)
    if expected:
        assert first == expected[0]
    else:
        assert first > at - 1 + WINDOW
    # Without a time given: the first at or after now (now to the ms, rounded up).
    assert recur.first_ms(at - late) == recur.aligned_ms(math.ceil(at - late)) >= at - late


@CALENDAR
@given(moment=moments(), cron=crons(), lag=st.integers(-HOUR, 6 * HOUR), part=st.floats(0, 1))
@example(
    moment=("Europe/Berlin", ms("2027-10-31T00:30:00+00:00")), cron="30 2 * * *", lag=40, part=0.0
)
def test_the_next_occurrence_is_after_the_fired_one_and_now(
    moment: tuple[str, int], cron: str, lag: int, part: float
) -> None:
    """``due`` is any time (a rescheduled occurrence), ``now`` the confirmation's."""
    zone, due = moment
    now = due + lag * MINUTE + part
    nxt = series(cron, zone).next_ms(due, now)
    after = max(due, math.floor(now))
    assert nxt is None or nxt > max(due, now)
    expected = reference(cron, zone, after, after + WINDOW)
    if expected:
        assert nxt == expected[0]
    else:
        assert nxt is None or nxt > after + WINDOW


@CALENDAR
@given(moment=moments(), cron=crons())
@example(moment=("America/New_York", ms("2027-11-07T05:10:00+00:00")), cron="30 1 * * *")
@example(moment=("Australia/Lord_Howe", ms("2027-10-02T14:00:00+00:00")), cron="0 */3 * * *")
def test_occurrences_strictly_increase_and_follow_the_rules(
    moment: tuple[str, int], cron: str
) -> None:
    zone, at = moment
    dues = occurrences(series(cron, zone), at, at - 1 + WINDOW)
    assert dues == reference(cron, zone, at - 1, at - 1 + WINDOW)
    walls = [shown(due, ZoneInfo(zone)) for due in dues]
    if not elapsed(cron):  # a local time fires once, and never goes back
        assert walls == sorted(set(walls))


@CALENDAR
@given(change=changes(repeats=True), cron=crons(), lead=st.integers(0, 120))
@example(change=GOOSE_BAY_BACK, cron="* 0 * * *", lead=0)
def test_the_night_the_clocks_go_back(change: Change, cron: str, lead: int) -> None:
    """Each matching local time of the repeated span fires at its first pass;
    at its second too for an elapsed-time entry; a fixed-time entry fires
    nothing in the second pass."""
    zone, matches = ZoneInfo(change.zone), matcher(cron)
    start = change.at_ms - change.span_ms - lead * MINUTE
    dues = occurrences(series(cron, change.zone), start, change.at_ms + change.span_ms + HOUR)
    last = shown(change.at_ms - 1, zone)  # the last local time of the first pass
    for local in minutes_between(shown(change.at_ms, zone) - timedelta(minutes=1), last):
        if matches(local):
            assert instant(local, zone, fold=0) in dues
            assert (instant(local, zone, fold=1) in dues) == elapsed(cron)
    second_pass = [d for d in dues if change.at_ms <= d < change.at_ms + change.span_ms]
    assert elapsed(cron) or not second_pass


@CALENDAR
@given(change=changes(repeats=False), cron=crons(), lead=st.integers(1, 120))
@example(change=GUAYAQUIL_FORWARD, cron="* 0 * * sat,sun", lead=1)
def test_the_night_the_clocks_go_forward(change: Change, cron: str, lead: int) -> None:
    """A local time the gap skips: a fixed-time entry fires at the instant the
    gap ends (once, however many it skipped); an elapsed-time one does not."""
    zone, matches = ZoneInfo(change.zone), matcher(cron)
    dues = occurrences(series(cron, change.zone), change.at_ms - lead * MINUTE, change.at_ms + HOUR)
    ends = shown(change.at_ms, zone)  # the first local time after the gap
    skipped = minutes_between(shown(change.at_ms - 1, zone), ends - timedelta(minutes=1))
    in_gap = any(matches(local) for local in skipped)
    fires_at_end = change.at_ms in dues
    if elapsed(cron):
        assert fires_at_end == matches(ends)
    else:
        assert fires_at_end == (matches(ends) or in_gap)


@CALENDAR
@given(moment=moments(), every=everies(), lag=st.integers(-HOUR, 10 * HOUR), part=st.floats(0, 1))
def test_every_is_elapsed_time_whatever_the_clocks_do(
    moment: tuple[str, int], every: int, lag: int, part: float
) -> None:
    _, at = moment
    recur = Recurrence(every_ms=every)
    assert recur.aligned_ms(at) == at
    assert recur.first_ms(at - part) == math.ceil(at - part) + every
    now = at + lag * MINUTE + part
    nxt = recur.next_ms(at, now)
    assert nxt is not None and nxt > max(at, now)
    assert (nxt - at) % every == 0 and nxt - every <= max(at, now)  # the first such
    dues = occurrences(recur, at, at + 5 * every)
    assert dues == [at + k * every for k in range(6)]


@settings(CALENDAR, max_examples=40)
@given(
    name=st.deferred(lambda: st.sampled_from(sorted(all_changes()))),
    cron=crons(),
    at=st.integers(MAX_DUE_MS - 3 * DAY, MAX_DUE_MS),
)
def test_at_the_end_of_9999_a_series_ends_and_never_fails(name: str, cron: str, at: int) -> None:
    recur = series(cron, name)
    assert recur.aligned_ms(at) >= at
    nxt = recur.next_ms(at, at)
    assert nxt is None or at < nxt <= MAX_DUE_MS


# --- the measurements, and cronsim's other slips -----------------------------


@pytest.mark.parametrize(
    ("cron", "zone", "at", "first"),
    [
        # 02:10 CET, the second pass: that night's 02:30 was at 00:30Z (was: the first).
        ("30 2 * * *", "Europe/Berlin", "2027-10-31T01:10:00+00:00", "2027-11-01T01:30:00+00:00"),
        (
            "30 1 * * *",
            "America/New_York",
            "2027-11-07T06:10:00+00:00",
            "2027-11-08T06:30:00+00:00",
        ),
        # 03:30 CET, the first local time after the repeated hour (was 00:30Z: 02:30 CEST).
        ("30 0-3 * * *", "Europe/Berlin", "2027-10-31T01:10:00+00:00", "2027-10-31T02:30:00+00:00"),
    ],
)
def test_started_in_the_second_pass_a_series_starts_after_it(
    cron: str, zone: str, at: str, first: str
) -> None:
    recur = series(cron, zone)
    assert recur.aligned_ms(ms(at)) == ms(first)
    assert recur.first_ms(ms(at)) == ms(first)


def test_the_callers_start_and_advance_a_series_after_the_time_given() -> None:
    """resolve (a new series' first due time, domain/spec.py) and
    next_occurrence (what a store's advance writes, domain/meta.py)."""
    rules = TaskRules(default_routing_key="calendar", max_payload_bytes=64)
    spec = TaskSpec(at_ms=BERLIN_NIGHT, cron="30 2 * * *", timezone="Europe/Berlin")
    task = resolve(spec, BERLIN_NIGHT - 5000, rules)
    assert task.due_ms == ms("2027-11-01T01:30:00+00:00")
    fired = ms("2027-10-31T00:30:00+00:00")
    advanced = next_occurrence(task.meta, fired, BERLIN_NIGHT)
    assert advanced is not None
    assert advanced[0] == ms("2027-11-01T01:30:00+00:00")
    assert advanced[1].recur is not None and advanced[1].recur.occurrence == 2


def test_confirmed_in_the_second_pass_an_occurrence_does_not_fire_again() -> None:
    """The issue's loop: 02:30 CEST (00:30Z) confirmed at 01:10Z, and each
    occurrence confirmed 100 ms after it fired: one fires that night."""
    recur = series("30 2 * * *", "Europe/Berlin")
    due, now = ms("2027-10-31T00:30:00+00:00"), BERLIN_NIGHT - 100
    fired: list[int] = []
    while due < ms("2027-10-31T02:00:00+00:00") and len(fired) < 50:
        fired.append(due)
        now = max(now, due) + 100
        nxt = recur.next_ms(due, now)
        assert nxt is not None
        due = nxt
    assert fired == [ms("2027-10-31T00:30:00+00:00")]
    assert due == ms("2027-11-01T01:30:00+00:00")


def test_a_night_of_30_0_to_3_in_berlin() -> None:
    recur = series("30 0-3 * * *", "Europe/Berlin")
    dues = occurrences(recur, ms("2027-10-30T22:00:00+00:00"), ms("2027-10-31T03:00:00+00:00"))
    assert dues == [
        ms("2027-10-30T22:30:00+00:00"),  # 00:30 CEST
        ms("2027-10-30T23:30:00+00:00"),  # 01:30 CEST
        ms("2027-10-31T00:30:00+00:00"),  # 02:30 CEST; not 02:30 CET
        ms("2027-10-31T02:30:00+00:00"),  # 03:30 CET
    ]


def test_a_30_minute_change_misses_no_hour() -> None:
    """Australia/Lord_Howe, 2027-10-03: 02:00 +10:30 becomes 02:30 +11; cronsim
    given the zone stepped whole hours through UTC and missed 03:00."""
    dues = occurrences(
        series("0 */3 * * *", "Australia/Lord_Howe"),
        ms("2027-10-02T14:00:00+00:00"),
        ms("2027-10-03T00:00:00+00:00"),
    )
    assert dues == [
        ms("2027-10-02T16:00:00+00:00"),  # 03:00 +11
        ms("2027-10-02T19:00:00+00:00"),  # 06:00 +11
        ms("2027-10-02T22:00:00+00:00"),  # 09:00 +11
    ]


def test_a_change_at_one_minute_past_midnight_does_not_loop() -> None:
    """America/Goose_Bay, 2002-10-27: 00:01 -03 became 23:01 -04. cronsim gave
    00:00 -03 again as the occurrence after 00:00 -03 (a loop); elapsed time:
    00:00 -04 next, an hour later, then every minute of hour 0 after it."""
    recur = series("* 0 * * *", "America/Goose_Bay")
    first = ms("2002-10-27T03:00:00+00:00")  # 00:00 -03
    assert recur.next_ms(first, first) == ms("2002-10-27T04:00:00+00:00")  # 00:00 -04
    assert recur.next_ms(first + HOUR, first + HOUR) == first + HOUR + MINUTE


def test_a_midnight_change_skips_an_elapsed_time_entry_s_hour_0() -> None:
    """America/Santiago, Sunday 2027-09-05: Saturday 24:00 -04 became 01:00 -03,
    there is no hour 0 that day. cronsim fired "*/30 0 * * SUN" once at 01:00
    when its search entered the Sunday at 00:00 (not when it came by the hour);
    elapsed time: the next Sunday's. A fixed-time 00:00 fires at 01:00."""
    saturday = ms("2027-09-04T12:00:00+00:00")
    elapsed_entry = series("*/30 0 * * SUN", "America/Santiago")
    assert elapsed_entry.aligned_ms(saturday) == ms("2027-09-12T03:00:00+00:00")  # 00:00 -03
    fixed_entry = series("0 0 * * SUN", "America/Santiago")
    assert fixed_entry.aligned_ms(saturday) == ms("2027-09-05T04:00:00+00:00")  # 01:00 -03


def test_an_elapsed_time_entry_only_ever_in_a_gap_ends_the_series() -> None:
    """Europe/Berlin: 02:xx on the last Sunday of March never happens; the
    search gives up after a bounded number of gaps, as for no match at all."""
    recur = series("* 2 * 3 0L", "Europe/Berlin")
    at = ms("2027-01-01T00:00:00+00:00")
    assert recur.aligned_ms(at) == MAX_DUE_MS + 1
    assert recur.next_ms(at, at) is None
    # Any other Sunday of March has its 02:00 (CET, 01:00Z).
    assert series("* 2 * 3 0", "Europe/Berlin").aligned_ms(at) == ms("2027-03-07T01:00:00+00:00")
