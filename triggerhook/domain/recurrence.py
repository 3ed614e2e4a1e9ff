"""Recurring tasks: when the next occurrence of a series is due (pure, no I/O
but the time-zone database).

A series is one stored task whose row is rewritten to its next occurrence in
the same transaction that removes the confirmed one (R5s,
docs/design/ownership.md): one occurrence is pending at a time. Its schedule:

* ``every``: an ISO 8601 duration (``PT15M``, ``P1D``, ``P2W``, ``PT0.5S``
  not: at least 1 s), elapsed time: ``P1D`` is 86,400 s, whatever the clocks
  of any time zone do;
* ``cron``: 5 fields (minute hour day-of-month month day-of-week, the syntax
  of Debian's cron) in an IANA ``timezone`` (default UTC), with a policy for
  the local times that daylight-saving changes repeat or skip.

Daylight saving (docs/design/flow-control.md section 5). A local time the
entry matches is shown by the zone's clocks once, twice (clocks back: a
repeated span, its first and its second pass) or never (clocks forward: a
gap). Two policies of the series say which instants fire:

* ``dst_repeated``: a matching local time shown twice fires at its ``first``
  pass only, at its ``last`` (second) pass only, or at ``both``;
* ``dst_skipped``: the matching local times in a gap ``shift`` to the instant
  the gap ends, the first minute after it (02:30 in Europe/Berlin on the night
  of the change: 03:00 CEST), one occurrence however many of them the gap
  skipped (one also when the local time at the gap's end matches itself); or
  ``skip``: they do not fire (an entry that only ever matches in gaps ends,
  after a bounded search, as one that matches nothing).

Not given (None), each is Debian's cron's rule for the kind of entry. An
entry whose minute or hour field starts with ``*`` (``*/15 * * * *``,
``0 * * * *``, ``0 */2 * * *``, ``* 2 * * *``) follows elapsed time: it
fires at each instant whose local time matches, ``both`` and ``skip``. Any
other entry (``30 2 * * *``, ``0 9-17 * * 1-5``) fires each matching local
time once, the first time the clocks reach it: ``first`` and ``shift``. A
policy given applies to either kind, each of the two on its own; ``every``
takes none.

So the occurrences are a set of instants fixed by the entry, the zone and the
policy, and the next is the first of them strictly after the time asked,
wherever that is; an instant fires at most once (occurrences strictly
increase). ``first``: a series started, or an occurrence confirmed, in the
second pass of a repeated span has passed that span's times: its next is the
first after the span. ``last``: confirmed in the first pass (at 02:40 CEST on
the night Berlin's clocks go back, for ``30 2 * * *``), the second pass of
the span's matching times is still ahead, even of those the first pass has
shown (02:30 CET: its first pass, 02:30 CEST, was no occurrence); confirmed
in the second pass, only those still ahead in it. ``both``: each pass's, as
far as it has not been passed.

cronsim matches the calendar, on local times; this module maps local times
to instants: cronsim given a zone loses the fold of a repeated hour (its
second pass found times of the first: due in the past, fired again and again,
issue 29) and steps whole hours through UTC (missing times in zones whose
clocks change by 30 minutes, Australia/Lord_Howe). Each pass keeps the order
of local times (PEP 495: fold 0, the first pass, of a repeated time; fold 1,
the second; a time shown once is both), so the first occurrence of a pass
after an instant is the first matching local time past the latest that pass
has reached by then, and the next occurrence is the earlier of the passes the
policy fires (one search, or two for ``both``; a gap's times count in each).

The next occurrence is the first one due after both the occurrence just fired
and the current time, strictly: occurrences missed while nothing could fire
them (an outage) are not replayed, one fires, as with cron; a series'
occurrences strictly increase. A series with ``until`` ends with its last
occurrence at or before it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Literal, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from triggerhook_client.timerules import TimeError, every_checked, every_ms

from triggerhook.domain.bounds import MAX_DUE_MS
from triggerhook.errors import ValidationError

MAX_CRON_CHARS = 120
_ZONE = re.compile(r"[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+){0,3}")
# In the zone database but not IANA zones: the host's own zone, and copies.
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})
_NOT_ZONE_PREFIXES = ("posix/", "right/")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
# Matching times in gaps in a row after which an entry whose policy skips them
# counts as matching nothing ("* 2 * 3 0L" in Europe/Berlin: only ever in the
# gap); bounds a call's work (about a thousand years of yearly transitions).
_MAX_GAPS = 1000

DstRepeated = Literal["first", "last", "both"]
DstSkipped = Literal["shift", "skip"]
CatchUp = Literal["skip", "one", "all"]
_Policy = TypeVar("_Policy", DstRepeated, DstSkipped, CatchUp)
# The policies' values (the wire's and the record's), each to itself: a str
# given is looked up, so only these strings come through, as these literals.
DST_REPEATED: dict[str, DstRepeated] = {"first": "first", "last": "last", "both": "both"}
DST_SKIPPED: dict[str, DstSkipped] = {"shift": "shift", "skip": "skip"}
# What a series does with occurrences missed while nothing could fire them
# (domain/series.py): None is "one", the behaviour before there was a choice.
CATCH_UP: dict[str, CatchUp] = {"skip": "skip", "one": "one", "all": "all"}
MAX_CATCH_UP = 1000  # catch_up_max's ceiling: the copies one transaction writes
DEFAULT_CATCH_UP_MAX = 100
# The passes of a repeated local time a policy fires: PEP 495's folds.
_FOLDS: dict[DstRepeated, tuple[int, ...]] = {"first": (0,), "last": (1,), "both": (0, 1)}


@dataclass(frozen=True, slots=True)
class Recurrence:
    """A series' schedule (exactly one of ``every_ms`` and ``cron``), its end
    (``until_ms``, inclusive; None: none), the occurrence the row stands for
    (1: the first), ``stopped``: a cancel came while an occurrence was being
    published (too late for it), so the series ends with it; and a cron
    series' daylight-saving policy (None: the default for its kind of entry,
    see the module's docstring). ``catch_up`` (None: "one") and
    ``catch_up_max`` (with "all" only): what happens to occurrences missed
    while nothing could fire them; ``paused``: no occurrence fires, and
    ``resume_ms`` is the occurrence it resumes at (None while the occurrence
    armed when it was paused is still being published): domain/series.py."""

    every_ms: int | None = None
    cron: str | None = None
    timezone: str = "UTC"
    until_ms: int | None = None
    occurrence: int = 1
    stopped: bool = False
    dst_repeated: DstRepeated | None = None
    dst_skipped: DstSkipped | None = None
    catch_up: CatchUp | None = None
    catch_up_max: int | None = None
    paused: bool = False
    resume_ms: int | None = None

    def first_ms(self, now_ms: float) -> int:
        """When the first occurrence is due when no time was given: one
        ``every`` from now, or the first cron occurrence at or after now."""
        if self.every_ms is not None:
            return math.ceil(now_ms) + self.every_ms
        return self._cron_after(math.ceil(now_ms) - 1)

    def aligned_ms(self, due_ms: int) -> int:
        """The first occurrence at or after a given first time, never before
        it (cron: the first matching minute, by the rules above; every: that
        time itself)."""
        return due_ms if self.every_ms is not None else self._cron_after(due_ms - 1)

    def next_ms(self, due_ms: int, now_ms: float) -> int | None:
        """When the occurrence after the one due at ``due_ms`` is due: the
        first strictly after both ``due_ms`` and ``now_ms`` (none missed on
        purpose before ``now_ms``); None: the series ended."""
        if self.stopped:
            return None
        after = max(due_ms, math.floor(now_ms))
        if self.every_ms is not None:
            steps = (after - due_ms) // self.every_ms + 1
            due = due_ms + steps * self.every_ms
        else:
            due = self._cron_after(after)
        if due > MAX_DUE_MS or (self.until_ms is not None and due > self.until_ms):
            return None
        return due

    def _cron_after(self, after_ms: int) -> int:
        """The first occurrence of the cron schedule due after ``after_ms``
        (MAX_DUE_MS + 1: none before year 10000)."""
        assert self.cron is not None
        zone = ZoneInfo(self.timezone)
        elapsed = _follows_elapsed_time(self.cron)
        repeated = self.dst_repeated or ("both" if elapsed else "first")
        shift = (self.dst_skipped or ("skip" if elapsed else "shift")) == "shift"
        try:
            due = min(
                _pass_after(self.cron, zone, wall, fold, shift)
                for fold, wall in _reached(after_ms, zone, _FOLDS[repeated])
            )
        except (_NoMatch, OverflowError, ValueError):  # none before year 10000 (or in reach)
            return MAX_DUE_MS + 1
        # A guard, not a rule: a due time not after the one asked after would fire again at
        # once, and again (issue 29); the rules never give one (test_calendar_properties.py,
        # test_recurrence_dst.py).
        return due if due > after_ms else MAX_DUE_MS + 1

    def to_record(self) -> dict[str, object]:
        """What a store keeps (:func:`from_record`): a policy only when given,
        so a series without one is stored as before there were policies."""
        record: dict[str, object] = {"n": self.occurrence}
        if self.every_ms is not None:
            record["every_ms"] = self.every_ms
        else:
            record["cron"] = self.cron
            record["timezone"] = self.timezone
            if self.dst_repeated is not None:
                record["dst_repeated"] = self.dst_repeated
            if self.dst_skipped is not None:
                record["dst_skipped"] = self.dst_skipped
        if self.until_ms is not None:
            record["until_ms"] = self.until_ms
        if self.stopped:
            record["stopped"] = True
        if self.catch_up is not None:
            record["catch_up"] = self.catch_up
        if self.catch_up_max is not None:
            record["catch_up_max"] = self.catch_up_max
        if self.paused:
            record["paused"] = True
            if self.resume_ms is not None:
                record["resume_ms"] = self.resume_ms
        return record


def _follows_elapsed_time(cron: str) -> bool:
    """Whether a cron entry runs on elapsed time (its minute or hour field
    starts with ``*``: Debian's cron's "wildcard" entries) rather than at
    fixed wall-clock times."""
    minute, hour = cron.split()[:2]
    return minute.startswith("*") or hour.startswith("*")


class _NoMatch(Exception):
    """The expression matches no time the search may reach."""


def _matches_after(cron: str, wall: datetime) -> datetime:
    """The first wall-clock time after ``wall`` (naive, local) that matches:
    cronsim on naive times, the calendar alone (given a zone it loses the fold)."""
    try:
        return next(CronSim(cron, wall.replace(microsecond=0, fold=0)))
    except StopIteration:  # none in 50 years
        raise _NoMatch from None


def _wall(ms: int, zone: ZoneInfo) -> datetime:
    """The wall-clock time (naive) the zone's clocks show at epoch ms ``ms``."""
    return (_EPOCH + ms * _MS).astimezone(zone).replace(tzinfo=None)


def _instant(wall: datetime, zone: ZoneInfo, fold: int) -> int:
    """Epoch ms of a wall-clock time: fold 0 its first pass, 1 its second (the
    same for a time that happens once; in a gap, 0 reads it at the offset before
    the gap, which lands after the gap, 1 before it: PEP 495)."""
    return (wall.replace(tzinfo=zone, fold=fold) - _EPOCH) // _MS


def _change(lo_ms: int, hi_ms: int, zone: ZoneInfo) -> int:
    """The first epoch ms in (lo_ms, hi_ms] at hi_ms's UTC offset: the
    transition between them (the zone's clocks change once in so short a span)."""
    target = (_EPOCH + hi_ms * _MS).astimezone(zone).utcoffset()
    while hi_ms - lo_ms > 1:
        mid = (lo_ms + hi_ms) // 2
        if (_EPOCH + mid * _MS).astimezone(zone).utcoffset() == target:
            hi_ms = mid
        else:
            lo_ms = mid
    return hi_ms


def _reached(after_ms: int, zone: ZoneInfo, folds: tuple[int, ...]) -> list[tuple[int, datetime]]:
    """For each pass (fold) asked, the latest local time that pass has reached
    by ``after_ms`` (its instants of the local times up to it are at or before
    ``after_ms``, of those after it after): its next occurrence is the first
    matching local time past it. They differ only in a repeated span: in its
    first pass, the second pass has not reached the span's start; in its
    second, the first pass has reached the span's end. Elsewhere both are at
    the local time shown, and one search does (a local time's first pass is
    never after its second)."""
    wall = _wall(after_ms, zone)
    first, second = _instant(wall, zone, 0), _instant(wall, zone, 1)
    if first == second:  # a time that happens once: both passes are at it
        return [(folds[0], wall)]
    change = _change(first, second, zone)
    if after_ms == first:  # the first pass: the second has the whole span ahead
        reached = {0: wall, 1: _wall(change, zone) - _MS}
    else:  # the second pass: the first went up to the change
        reached = {0: _wall(change - 1, zone), 1: wall}
    return [(fold, reached[fold]) for fold in folds]


def _pass_after(cron: str, zone: ZoneInfo, wall: datetime, fold: int, shift: bool) -> int:
    """The first occurrence, in one pass (fold), of the matching local times
    after ``wall``: the fold's instant of one the clocks show; of one in a
    gap, the instant the gap ends (``shift``) or on from there (skip);
    _NoMatch after _MAX_GAPS in gaps in a row ("* 2 * 3 0L" in Europe/Berlin
    with skip: only ever in the gap)."""
    for _ in range(_MAX_GAPS):
        due = _matches_after(cron, wall)
        first, second = _instant(due, zone, 0), _instant(due, zone, 1)
        if first <= second:
            return second if fold else first
        end = _change(second, first, zone)  # in a gap: fold 1 reads it before, 0 after
        if shift:
            return end
        wall = _wall(end, zone) - _MS  # on from the gap's end
    raise _NoMatch


def make_recurrence(
    *,
    every: object = None,
    cron: object = None,
    timezone: object = None,
    until_ms: int | None = None,
    dst_repeated: object = None,
    dst_skipped: object = None,
    catch_up: object = None,
    catch_up_max: object = None,
) -> Recurrence | None:
    """A validated schedule (None: not a series); ValidationError names the
    field. ``dst_repeated`` and ``dst_skipped``: a cron series' policy (None:
    the default by its kind of entry); ``catch_up`` and ``catch_up_max``:
    any series'."""
    policy = {"dst_repeated": dst_repeated, "dst_skipped": dst_skipped}
    given = [field for field, value in policy.items() if value is not None]
    series_only = {"timezone": timezone, "until": until_ms, "catch_up": catch_up}
    series_only["catch_up_max"] = catch_up_max
    if every is None and cron is None:
        named = [field for field, value in series_only.items() if value is not None]
        if named:
            raise ValidationError(named[0], "applies to a series only: give every or cron")
        if given:
            raise ValidationError(given[0], "only with cron")
        return None
    if every is not None and cron is not None:
        raise ValidationError("every", "give at most one of every and cron")
    if every is not None:
        if timezone is not None:
            raise ValidationError("timezone", "applies to cron only (every is elapsed time)")
        if given:
            raise ValidationError(given[0], "only with cron (every is elapsed time)")
        made = Recurrence(every_ms=parse_every(every), until_ms=until_ms)
    else:
        zone = parse_zone(timezone)
        made = Recurrence(
            cron=parse_cron(cron, zone),
            timezone=zone,
            until_ms=until_ms,
            dst_repeated=parse_dst_repeated(dst_repeated),
            dst_skipped=parse_dst_skipped(dst_skipped),
        )
    policy_of_catch_up = parse_catch_up(catch_up)
    return replace(
        made,
        catch_up=policy_of_catch_up,
        catch_up_max=parse_catch_up_max(catch_up_max, policy_of_catch_up),
    )


def parse_dst_repeated(value: object, field: str = "dst_repeated") -> DstRepeated | None:
    """What a cron series fires of a local time shown twice (None: not given)."""
    return None if value is None else _one_of(DST_REPEATED, value, field)


def parse_dst_skipped(value: object, field: str = "dst_skipped") -> DstSkipped | None:
    """What a cron series fires for local times a gap skips (None: not given)."""
    return None if value is None else _one_of(DST_SKIPPED, value, field)


def parse_catch_up(value: object, field: str = "catch_up") -> CatchUp | None:
    """What a series does with occurrences it missed (None: not given, "one")."""
    return None if value is None else _one_of(CATCH_UP, value, field)


def parse_catch_up_max(
    value: object, catch_up: CatchUp | None, field: str = "catch_up_max"
) -> int | None:
    """How many missed occurrences a series with catch_up "all" fires (None:
    not given, DEFAULT_CATCH_UP_MAX); only with "all"."""
    if value is None:
        return None
    if catch_up != "all":
        raise ValidationError(field, 'only with catch_up "all"')
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CATCH_UP:
        raise ValidationError(field, f"must be an integer from 1 to {MAX_CATCH_UP}")
    return value


def _one_of(allowed: dict[str, _Policy], value: object, field: str) -> _Policy:
    if isinstance(value, str) and value in allowed:
        return allowed[value]
    raise ValidationError(field, "must be one of " + ", ".join(allowed))


def parse_every(value: object, field: str = "every") -> int:
    """An ISO 8601 duration in whole weeks, days, hours, minutes and seconds
    (to the millisecond), at least 1 s, in milliseconds; or (the library's
    ``every_ms``) a whole number of milliseconds. The rules:
    :func:`triggerhook_client.timerules.every_ms`, shared with the client."""
    try:
        if isinstance(value, int) and not isinstance(value, bool):
            return every_checked(value, field)
        return every_ms(value, field)
    except TimeError as exc:
        raise ValidationError(exc.field, exc.message) from None


def every_text(every_ms: int) -> str:
    """``every_ms`` as an ISO 8601 duration (PT15M, P1D, PT1.5S)."""
    days, rest = divmod(every_ms, 86_400_000)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    text = "P" + (f"{days}D" if days else "")
    clock = (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    if seconds or millis:
        clock += f"{seconds}.{millis:03d}".rstrip("0").rstrip(".") + "S"
    return text + ("T" + clock if clock else "")


def parse_zone(value: object, field: str = "timezone") -> str:
    if value is None:
        return "UTC"
    if (
        not isinstance(value, str)
        or len(value) > 64
        or not _ZONE.fullmatch(value)
        or value in _NOT_ZONES
        or value.startswith(_NOT_ZONE_PREFIXES)
    ):
        raise ValidationError(field, "must be an IANA time zone name such as Europe/Berlin")
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a directory ("Europe")
        raise ValidationError(field, f"unknown time zone {value!r}") from None
    return value


def parse_cron(value: object, zone: str, field: str = "cron") -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_CRON_CHARS:
        raise ValidationError(
            field, f"must be a cron expression of 5 fields (at most {MAX_CRON_CHARS} characters)"
        )
    text = " ".join(value.split())  # any whitespace separates fields
    if not text.isascii():  # cronsim upper-cases: a long s (U+017F) in "sun" would read as SUN
        raise ValidationError(field, "must be ASCII (names such as MON, JAN)")
    if len(text.split(" ")) != 5:
        raise ValidationError(
            field, "must have 5 fields: minute hour day-of-month month day-of-week"
        )
    try:
        CronSim(text, datetime(2000, 1, 1, tzinfo=ZoneInfo(zone)))  # parses it
    except CronSimError as exc:
        raise ValidationError(field, f"is not a cron expression: {exc}") from None
    return text


def from_record(record: object) -> Recurrence:
    """The schedule a store kept (:meth:`Recurrence.to_record`)."""
    if not isinstance(record, dict):
        raise ValidationError("recur", "is not an object")
    until = record.get("until_ms")
    if until is not None and (isinstance(until, bool) or not isinstance(until, int)):
        raise ValidationError("recur.until_ms", "is not epoch milliseconds")
    made = make_recurrence(
        every=record.get("every_ms"),
        cron=record.get("cron"),
        timezone=record.get("timezone") if "cron" in record else None,
        until_ms=until,
        dst_repeated=record.get("dst_repeated"),
        dst_skipped=record.get("dst_skipped"),
        catch_up=record.get("catch_up"),
        catch_up_max=record.get("catch_up_max"),
    )
    if made is None:
        raise ValidationError("recur", "has neither every_ms nor cron")
    occurrence = record.get("n", 1)
    if isinstance(occurrence, bool) or not isinstance(occurrence, int) or occurrence < 1:
        raise ValidationError("recur.n", "is not an occurrence number")
    stopped = record.get("stopped") is True
    paused = record.get("paused") is True
    resume = record.get("resume_ms") if paused else None
    if resume is not None and (isinstance(resume, bool) or not isinstance(resume, int)):
        raise ValidationError("recur.resume_ms", "is not epoch milliseconds")
    return replace(made, occurrence=occurrence, stopped=stopped, paused=paused, resume_ms=resume)
