"""Local times and instants in IANA zones, and cron entries read minute by
minute: the reference the calendar tests compare domain/recurrence.py with
(tests/unit/test_calendar_properties.py, tests/unit/test_recurrence_dst.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cronsim import CronSim

from triggerhook.domain.recurrence import parse_zone
from triggerhook.errors import ValidationError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MS = timedelta(milliseconds=1)


@dataclass(frozen=True)
class Change:
    """A change of a zone's UTC offset: from ``at_ms`` on, ``after`` instead of ``before``."""

    zone: str
    at_ms: int
    before: timedelta
    after: timedelta

    @property
    def repeats(self) -> bool:
        """Clocks back: the local times of the last ``span_ms`` before it happen again."""
        return self.after < self.before

    @property
    def span_ms(self) -> int:
        return abs(self.after - self.before) // MS

    @property
    def span_start(self) -> datetime:
        """The first local time the change repeats, or the gap skips."""
        local = shown(self.at_ms, ZoneInfo(self.zone))
        return local if self.repeats else local - self.span_ms * MS


def offset(ms: int, zone: ZoneInfo) -> timedelta:
    found = (EPOCH + ms * MS).astimezone(zone).utcoffset()
    assert found is not None
    return found


def shown(ms: int, zone: ZoneInfo) -> datetime:
    """The local time (naive) the zone's clocks show at epoch ms ``ms``."""
    return (EPOCH + ms * MS).astimezone(zone).replace(tzinfo=None)


def instant(local: datetime, zone: ZoneInfo, fold: int = 0) -> int:
    """Epoch ms of a local time, at its first (fold 0) or second pass."""
    return (local.replace(tzinfo=zone, fold=fold) - EPOCH) // MS


def is_zone(name: str) -> bool:
    """An IANA zone the API takes (parse_zone)."""
    try:
        parse_zone(name)
    except ValidationError:
        return False
    return True


def elapsed(cron: str) -> bool:
    """Debian's cron's wildcard entries: the minute or hour field starts with ``*``."""
    minute, hour = cron.split()[:2]
    return minute.startswith("*") or hour.startswith("*")


def matcher(cron: str) -> Callable[[datetime], bool]:
    """Whether a local time (a whole minute) matches: cronsim's parse, no search."""
    parsed = CronSim(cron, datetime(2000, 1, 1))

    def matches(local: datetime) -> bool:
        return (
            local.minute in parsed.minutes
            and local.hour in parsed.hours
            and local.month in parsed.months
            and parsed.match_day(local.date())
        )

    return matches


def minutes_between(low: datetime, high: datetime) -> Iterator[datetime]:
    """The whole minutes in (low, high]."""
    local = low.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while local <= high:
        yield local
        local += timedelta(minutes=1)
