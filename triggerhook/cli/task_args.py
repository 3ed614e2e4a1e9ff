"""What ``schedule`` takes besides the due time, routing key and payload, as
given on the command line (:class:`Metadata`, its ``--late`` a
:class:`LateArg`): each backend hands it on, to the library's
:class:`~triggerhook.app.TaskSpec` or to the HTTP client's ``schedule``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypedDict

from triggerhook_client import Late

from triggerhook.domain.meta import LateKind, LatePolicy
from triggerhook.domain.timeparse import parse_at, parse_duration_ms
from triggerhook.errors import ValidationError

_WHOLE_MS = re.compile(r"[0-9]{1,18}")  # below 2**63: the API's 64-bit integer


@dataclass(frozen=True, slots=True)
class Metadata:
    """What ``schedule`` takes besides the time, key and payload: ``--tag``,
    ``--content-type``, ``--content-encoding``, ``--header`` and ``--late``
    (:class:`LateArg`), and a series' ``--every`` or ``--cron``,
    ``--timezone``, ``--dst-repeated``, ``--dst-skipped``, ``--until``
    (as ``--at`` takes it), ``--catch-up`` and ``--catch-up-max``,
    ``--on-conflict``, as given, and ``--dedup-window`` in milliseconds
    (:func:`parse_dedup_window`)."""

    tags: tuple[str, ...] = ()
    content_type: str | None = None
    content_encoding: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    late: LateArg | None = None
    every: str | None = None
    cron: str | None = None
    timezone: str | None = None
    dst_repeated: str | None = None
    dst_skipped: str | None = None
    until: str | None = None
    catch_up: str | None = None
    catch_up_max: int | None = None
    on_conflict: str | None = None
    dedup_window_ms: int | None = None

    @property
    def series(self) -> bool:
        return self.every is not None or self.cron is not None

    def arguments(self) -> MetaArguments:
        """All but ``late``, as the library's TaskSpec and the client's
        ``schedule`` both take them (the same names; None: not given)."""
        return MetaArguments(
            tags=self.tags or None,
            content_type=self.content_type,
            content_encoding=self.content_encoding,
            headers=dict(self.headers) or None,
            every=self.every,
            cron=self.cron,
            timezone=self.timezone,
            dst_repeated=self.dst_repeated,
            dst_skipped=self.dst_skipped,
            until=self.until,
            catch_up=self.catch_up,
            catch_up_max=self.catch_up_max,
            on_conflict=self.on_conflict,
            dedup_window_ms=self.dedup_window_ms,
        )


class MetaArguments(TypedDict):
    """:meth:`Metadata.arguments`."""

    tags: tuple[str, ...] | None
    content_type: str | None
    content_encoding: str | None
    headers: dict[str, str] | None
    every: str | None
    cron: str | None
    timezone: str | None
    dst_repeated: str | None
    dst_skipped: str | None
    until: str | None
    catch_up: str | None
    catch_up_max: int | None
    on_conflict: str | None
    dedup_window_ms: int | None


NO_METADATA = Metadata()

# A bare number: --in reads it as seconds, the API's dedup_window_ms as milliseconds.
_BARE_NUMBER = re.compile(r"\s*[+-]?[0-9]+(\.[0-9]*)?\s*")


def parse_dedup_window(text: str) -> int:
    """``--dedup-window``: a duration as ``--in`` takes it, with its unit
    (``1500ms``, ``90s``, ``24h``, ``7d``), in milliseconds. A bare number is
    refused rather than guessed at (seconds for ``--in``, milliseconds in the
    API's ``dedup_window_ms``). Its bounds (0 to 30 days) are the library's
    and the daemon's, which name ``dedup_window_ms``."""
    if _BARE_NUMBER.fullmatch(text):
        raise ValidationError(
            "dedup_window", f"give its unit: {text.strip()[:20]}ms, or 90s, 24h, 7d"
        )
    return parse_duration_ms(text, "dedup_window")


@dataclass(frozen=True, slots=True)
class LateArg:
    """``--late`` as given: ``fire``, ``skip_after_ms=N`` (``ms``) or
    ``deadline=TIME`` (``deadline``, as ``--at`` takes it)."""

    kind: LateKind
    ms: int = 0
    deadline: str = ""

    @classmethod
    def parse(cls, text: str) -> LateArg:
        """The flag's value; a :class:`ValidationError` names the part."""
        if text == "fire":
            return cls(LateKind.FIRE)
        name, equals, value = text.partition("=")
        if equals and name == LateKind.SKIP_AFTER.value:
            if not _WHOLE_MS.fullmatch(value):
                raise ValidationError(
                    "late.skip_after_ms", "must be a whole number of milliseconds >= 0"
                )
            return cls(LateKind.SKIP_AFTER, ms=int(value))
        if equals and name == "deadline" and value:
            return cls(LateKind.DEADLINE, deadline=value)
        raise ValidationError(
            "late", f"expected fire, skip_after_ms=N or deadline=TIME, got {text[:40]!r}"
        )

    def policy(self) -> LatePolicy:
        """As the library takes it (a deadline parsed as the HTTP API does)."""
        if self.kind is LateKind.DEADLINE:
            return LatePolicy(self.kind, parse_at(self.deadline, "late.deadline", past_ok=True))
        return LatePolicy(self.kind, self.ms)

    def for_client(self) -> Late:
        """As the HTTP client takes it (the daemon parses a deadline)."""
        if self.kind is LateKind.FIRE:
            return "fire"
        if self.kind is LateKind.SKIP_AFTER:
            return {"skip_after_ms": self.ms}
        return {"deadline": self.deadline}
