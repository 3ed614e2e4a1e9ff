"""Recurring tasks: when the next occurrence of a series is due (pure, no I/O
but the time-zone database).

A series is one stored task whose row is rewritten to its next occurrence in
the same transaction that removes the confirmed one (R5s,
docs/design/ownership.md): one occurrence is pending at a time. Its schedule:

* ``every``: an ISO 8601 duration (``PT15M``, ``P1D``, ``P2W``, ``PT0.5S``
  not: at least 1 s), elapsed time: ``P1D`` is 86,400 s, whatever the clocks
  of any time zone do;
* ``cron``: 5 fields (minute hour day-of-month month day-of-week, the syntax
  of Debian's cron) in an IANA ``timezone`` (default UTC), evaluated as
  Debian's cron does across daylight-saving changes, by the same rule. An
  entry whose minute or hour field starts with ``*`` (``*/15 * * * *``,
  ``0 * * * *``, ``0 */2 * * *``, ``* 2 * * *``) follows elapsed time: it
  fires at each instant whose local time matches, so in both passes of a
  repeated hour, and not for a time that a gap (clocks forward) skips. Any
  other entry (``30 2 * * *``, ``0 9-17 * * 1-5``) fires each matching local
  time once, the first time the clocks reach it: a time that happens twice
  (clocks back) at its first pass; a time that does not exist at the instant
  the gap ends, the first minute after it (02:30 in Europe/Berlin on the
  night of the change: 03:00 CEST), however many matching times it skipped.
  A series of such an entry started, or an occurrence confirmed, in the
  second pass of a repeated hour has passed that hour's times: its next is
  the first after the hour.

cronsim matches the calendar, on local times; this module maps local times
to instants: cronsim given a zone loses the fold of a repeated hour (its
second pass found times of the first: due in the past, fired again and again,
issue 29) and steps whole hours through UTC (missing times in zones whose
clocks change by 30 minutes, Australia/Lord_Howe).

The next occurrence is the first one due after both the occurrence just fired
and the current time, strictly: occurrences missed while nothing could fire
them (an outage) are not replayed, one fires, as with cron; a series'
occurrences strictly increase. A series with ``until`` ends with its last
occurrence at or before it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
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
# Matching times in gaps in a row after which an elapsed-time entry counts as
# matching nothing ("* 2 * 3 0L" in Europe/Berlin: only ever in the gap);
# bounds a call's work (about a thousand years of yearly transitions).
_MAX_GAPS = 1000


@dataclass(frozen=True, slots=True)
class Recurrence:
    """A series' schedule (exactly one of ``every_ms`` and ``cron``), its end
    (``until_ms``, inclusive; None: none), the occurrence the row stands for
    (1: the first), and ``stopped``: a cancel came while an occurrence was
    being published (too late for it), so the series ends with it."""

    every_ms: int | None = None
    cron: str | None = None
    timezone: str = "UTC"
    until_ms: int | None = None
    occurrence: int = 1
    stopped: bool = False

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
        find = _elapsed_after if _follows_elapsed_time(self.cron) else _fixed_after
        try:
            due = find(self.cron, zone, after_ms)
        except (_NoMatch, OverflowError, ValueError):  # none before year 10000 (or in reach)
            return MAX_DUE_MS + 1
        # A guard, not a rule: a due time not after the one asked after would fire again at
        # once, and again (issue 29); the rules never give one (test_calendar_properties.py).
        return due if due > after_ms else MAX_DUE_MS + 1

    def to_record(self) -> dict[str, object]:
        record: dict[str, object] = {"n": self.occurrence}
        if self.every_ms is not None:
            record["every_ms"] = self.every_ms
        else:
            record["cron"] = self.cron
            record["timezone"] = self.timezone
        if self.until_ms is not None:
            record["until_ms"] = self.until_ms
        if self.stopped:
            record["stopped"] = True
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


def _fixed_after(cron: str, zone: ZoneInfo, after_ms: int) -> int:
    """A fixed-time entry fires each matching wall-clock time once, the first
    time the clocks reach it: the first pass of a repeated time; for a time in
    a gap, the instant the gap ends. So: the first matching time past the
    latest the clocks have shown by ``after_ms``."""
    wall = _wall(after_ms, zone)
    first = _instant(wall, zone, 0)
    if first < after_ms:  # the second pass of a repeated hour: its first pass went further
        wall = _wall(_change(first, after_ms, zone) - 1, zone)
    due = _matches_after(cron, wall)
    first, second = _instant(due, zone, 0), _instant(due, zone, 1)
    return first if first <= second else _change(second, first, zone)


def _elapsed_after(cron: str, zone: ZoneInfo, after_ms: int) -> int:
    """An elapsed-time entry fires at each instant whose wall-clock time
    matches: in both passes of a repeated hour, never in a gap."""
    wall = _wall(after_ms, zone)
    first, second = _instant(wall, zone, 0), _instant(wall, zone, 1)
    if first == second:  # a time that happens once: the next match in wall-clock order
        return _instant(_shown_after(cron, zone, wall), zone, 0)
    change = _change(first, second, zone)
    if after_ms == second:  # in the second pass: its matches, then the first after it
        due = _shown_after(cron, zone, wall)
        return _instant(due, zone, 1 if due <= _wall(change - 1, zone) else 0)
    # In the first pass: its next match, or the second pass's first, whichever comes first.
    ahead = _instant(_shown_after(cron, zone, wall), zone, 0)
    again = _instant(_shown_after(cron, zone, _wall(change, zone) - _MS), zone, 1)
    return min(ahead, again)


def _shown_after(cron: str, zone: ZoneInfo, wall: datetime) -> datetime:
    """The first matching wall-clock time after ``wall`` that the clocks show
    (a gap's are passed over); _NoMatch after _MAX_GAPS in gaps in a row."""
    for _ in range(_MAX_GAPS):
        due = _matches_after(cron, wall)
        first, second = _instant(due, zone, 0), _instant(due, zone, 1)
        if first <= second:
            return due
        wall = _wall(_change(second, first, zone), zone) - _MS  # on from the gap's end
    raise _NoMatch


def make_recurrence(
    *,
    every: object = None,
    cron: object = None,
    timezone: object = None,
    until_ms: int | None = None,
) -> Recurrence | None:
    """A validated schedule (None: not a series); ValidationError names the field."""
    if every is None and cron is None:
        if timezone is not None or until_ms is not None:
            field = "timezone" if timezone is not None else "until"
            raise ValidationError(field, "applies to a series only: give every or cron")
        return None
    if every is not None and cron is not None:
        raise ValidationError("every", "give at most one of every and cron")
    if every is not None:
        if timezone is not None:
            raise ValidationError("timezone", "applies to cron only (every is elapsed time)")
        return Recurrence(every_ms=parse_every(every), until_ms=until_ms)
    zone = parse_zone(timezone)
    return Recurrence(cron=parse_cron(cron, zone), timezone=zone, until_ms=until_ms)


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
    )
    if made is None:
        raise ValidationError("recur", "has neither every_ms nor cron")
    occurrence = record.get("n", 1)
    if isinstance(occurrence, bool) or not isinstance(occurrence, int) or occurrence < 1:
        raise ValidationError("recur.n", "is not an occurrence number")
    stopped = record.get("stopped") is True
    return Recurrence(made.every_ms, made.cron, made.timezone, made.until_ms, occurrence, stopped)
