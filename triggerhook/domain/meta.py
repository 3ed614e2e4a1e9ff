"""What a task carries besides its time, routing key and payload (pure, no I/O).

* **tags**: up to :data:`MAX_TAGS` labels, indexed for listing, counting and
  bulk cancel (a set: stored sorted, duplicates dropped);
* the event's AMQP properties: ``content_type``, ``content_encoding`` and
  custom ``headers`` (at most :data:`MAX_HEADERS`, :data:`MAX_HEADERS_BYTES`
  in all; names starting with ``x-`` are the engine's: refused);
* the **late-fire policy** (:class:`LatePolicy`): what to do with a task
  found late when it is published; None: the engine's configured default;
* a **schedule** (:class:`~triggerhook.domain.recurrence.Recurrence`): the
  task is a series, one occurrence pending at a time;
* a **dedup window** (``dedup_window_ms``, at most :data:`MAX_DEDUP_WINDOW_MS`;
  0: none): once the task fired, a create of its id within the window is
  answered "already fired" and writes nothing (docs/design/flow-control.md,
  section 2). A series' own row never leaves one (its id stays while it
  runs); its one-off copies (trigger, backfill, catch-up) carry its window.

All of it is part of a task's content: an idempotent re-create compares it.
Every limit is checked before any work that grows with the input.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from triggerhook.domain import recurrence
from triggerhook.domain.recurrence import Recurrence
from triggerhook.errors import ValidationError

MAX_TAGS = 8
TAG_PATTERN = re.compile(r"[A-Za-z0-9._:/-]{1,64}")
# AMQP short strings; printable ASCII keeps them readable in every tool.
PROPERTY_PATTERN = re.compile(r"[\x20-\x7e]{1,255}")
MAX_HEADERS = 16
HEADER_NAME_PATTERN = re.compile(r"[!-~]{1,128}")  # printable ASCII, no space
MAX_HEADER_VALUE_BYTES = 1024
MAX_HEADERS_BYTES = 4096  # names and values, as UTF-8
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
RESERVED_HEADER_PREFIX = "x-"
# A fired id's record is kept this long at most: the table stays bounded by
# (fires per second) x (window), and a month covers every retry horizon asked for.
MAX_DEDUP_WINDOW_MS = 30 * 24 * 3600 * 1000

HeaderValue = str | int | bool
Headers = tuple[tuple[str, HeaderValue], ...]


class LateKind(enum.Enum):
    FIRE = "fire"  # fire however late (the behaviour without a policy)
    SKIP_AFTER = "skip_after_ms"  # more than ``ms`` late: dead-letter instead
    DEADLINE = "deadline_ms"  # published after ``ms`` (epoch): dead-letter instead


@dataclass(frozen=True, slots=True)
class LatePolicy:
    """What to do with an event found late at publish time, by the engine's clock."""

    kind: LateKind
    ms: int = 0  # SKIP_AFTER: the tolerance; DEADLINE: epoch milliseconds

    def too_late(self, due_ms: int, now_ms: float) -> str | None:
        """Why the event must not be fired at ``now_ms`` (None: fire it)."""
        if self.kind is LateKind.SKIP_AFTER and now_ms - due_ms > self.ms:
            return f"late: {int(now_ms - due_ms)} ms after its due time (skip_after_ms {self.ms})"
        if self.kind is LateKind.DEADLINE and now_ms > self.ms:
            return f"late: {int(now_ms - self.ms)} ms past its deadline ({self.ms} epoch ms)"
        return None

    def to_json(self) -> object:
        return "fire" if self.kind is LateKind.FIRE else {self.kind.value: self.ms}


FIRE = LatePolicy(LateKind.FIRE)


@dataclass(frozen=True, slots=True, eq=False)
class Meta:
    """A task's tags, AMQP properties and late-fire policy (validated: :func:`make_meta`)."""

    tags: tuple[str, ...] = ()
    content_type: str | None = None
    content_encoding: str | None = None
    headers: Headers = ()  # sorted by name
    late: LatePolicy | None = None
    recur: Recurrence | None = None
    dedup_window_ms: int = 0

    def _key(self) -> tuple[object, ...]:
        # Headers compared with their types: True == 1 in Python, not on the wire.
        typed = tuple((name, type(value), value) for name, value in self.headers)
        return (
            self.tags,
            self.content_type,
            self.content_encoding,
            typed,
            self.late,
            self.recur,
            self.dedup_window_ms,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Meta) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __bool__(self) -> bool:
        # Anything set (unequal to NO_META), field by field: every published
        # event asks, and building two comparison keys cost ~0.7 µs.
        return bool(
            self.tags
            or self.content_type is not None
            or self.content_encoding is not None
            or self.headers
            or self.late is not None
            or self.recur is not None
            or self.dedup_window_ms != 0
        )

    def to_record(self) -> dict[str, object]:
        """The JSON-able form a store keeps (only what is set)."""
        record = _properties(self)
        if self.late is not None:
            record["late"] = self.late.to_json()
        if self.recur is not None:
            record["recur"] = self.recur.to_record()
        if self.dedup_window_ms:
            record["dedup_window_ms"] = self.dedup_window_ms
        return record


NO_META = Meta()


def _properties(meta: Meta) -> dict[str, object]:
    """The tags, AMQP properties and headers that are set."""
    data: dict[str, object] = {}
    if meta.tags:
        data["tags"] = list(meta.tags)
    if meta.content_type is not None:
        data["content_type"] = meta.content_type
    if meta.content_encoding is not None:
        data["content_encoding"] = meta.content_encoding
    if meta.headers:
        data["headers"] = dict(meta.headers)
    return data


def meta_json(meta: Meta, *, seconds: bool = False) -> dict[str, object]:
    """The metadata that is set, as a create body gives it (a deadline and a
    series' end in epoch ms: ``{"deadline_ms": N}``, ``until_ms``), and a
    series' occurrence (``stopping`` once a cancel came while it was being
    published): what the HTTP API's answers and the CLI show. With
    ``seconds``, beside each of those, deprecated, the same instant in epoch
    seconds under the older name (``deadline``, ``until``), as the HTTP API's
    answers gave it before."""
    data = _properties(meta)
    if meta.late is not None:
        late = meta.late.to_json()
        if seconds and isinstance(late, dict) and "deadline_ms" in late:
            late = {"deadline_ms": late["deadline_ms"], "deadline": late["deadline_ms"] / 1000}
        data["late"] = late
    if meta.recur is not None:
        data.update(_series_json(meta.recur, seconds))
    if meta.dedup_window_ms:
        data["dedup_window_ms"] = meta.dedup_window_ms
    return data


def _series_json(recur: Recurrence, seconds: bool) -> dict[str, object]:
    """A series' fields, as :func:`meta_json` shows them."""
    data: dict[str, object] = {}
    if recur.every_ms is not None:
        data["every"] = recurrence.every_text(recur.every_ms)
    else:
        data["cron"], data["timezone"] = recur.cron, recur.timezone
    record = recur.to_record()
    for name in ("dst_repeated", "dst_skipped", "catch_up", "catch_up_max"):
        if name in record:
            data[name] = record[name]
    if recur.until_ms is not None:
        data["until_ms"] = recur.until_ms
        if seconds:
            data["until"] = recur.until_ms / 1000
    data["occurrence"] = recur.occurrence
    if recur.stopped:
        data["stopping"] = True  # cancelled while this occurrence fires: the last one
    if recur.paused:
        data["paused"] = True  # no occurrence fires until it is resumed
        if recur.resume_ms is not None:
            data["resume_ms"] = recur.resume_ms  # the occurrence it resumes at
    return data


def next_occurrence(meta: Meta, due_ms: int, now_ms: float) -> tuple[int, Meta] | None:
    """A series' next occurrence after the one due at ``due_ms``: its due time
    and metadata (the occurrence number one up); None: not a series, or it ended."""
    recur = meta.recur
    due = None if recur is None else recur.next_ms(due_ms, now_ms)
    if recur is None or due is None:
        return None
    return due, dataclasses.replace(
        meta, recur=dataclasses.replace(recur, occurrence=recur.occurrence + 1)
    )


def stopping(meta: Meta) -> Meta | None:
    """The metadata of a series stopped after its current occurrence (a cancel
    came too late for it); None: not a series, or stopped already."""
    if meta.recur is None or meta.recur.stopped:
        return None
    return dataclasses.replace(meta, recur=dataclasses.replace(meta.recur, stopped=True))


def from_record(record: Mapping[str, object]) -> Meta:
    """The :class:`Meta` a store kept (:meth:`Meta.to_record`), validated again."""
    headers = record.get("headers")
    return make_meta(
        tags=record.get("tags"),
        content_type=record.get("content_type"),
        content_encoding=record.get("content_encoding"),
        headers=headers if isinstance(headers, Mapping) else None,
        late=parse_late(record["late"]) if "late" in record else None,
        recur=recurrence.from_record(record["recur"]) if "recur" in record else None,
        dedup_window_ms=record.get("dedup_window_ms"),
    )


def make_meta(
    *,
    tags: object = None,
    content_type: object = None,
    content_encoding: object = None,
    headers: Mapping[str, object] | None = None,
    late: LatePolicy | None = None,
    recur: Recurrence | None = None,
    dedup_window_ms: object = None,
) -> Meta:
    """Validated metadata; raises :class:`ValidationError` naming the field."""
    checked = _headers(headers)
    meta = Meta(
        tags=_tags(tags),
        content_type=_property(content_type, "content_type"),
        content_encoding=_property(content_encoding, "content_encoding"),
        headers=checked,
        late=_checked_late(late),
        recur=recur,
        dedup_window_ms=dedup_window(dedup_window_ms),
    )
    return NO_META if meta == NO_META else meta


def parse_late(value: object, field: str = "late") -> LatePolicy:
    """``"fire"``, ``{"skip_after_ms": N}`` or ``{"deadline_ms": epoch ms}``:
    the forms :meth:`LatePolicy.to_json` writes (the HTTP API also takes
    ``{"deadline": time}`` and converts it first)."""
    if value == "fire":
        return FIRE
    if not isinstance(value, Mapping) or len(value) != 1:
        raise ValidationError(field, 'must be "fire", {"skip_after_ms": N} or {"deadline_ms": N}')
    ((key, number),) = value.items()
    kinds = {kind.value: kind for kind in LateKind if kind is not LateKind.FIRE}
    if key not in kinds:
        raise ValidationError(f"{field}.{key}", "unknown (allowed: skip_after_ms, deadline_ms)")
    return LatePolicy(kinds[key], _non_negative(number, f"{field}.{key}"))


def dedup_window(value: object, field: str = "dedup_window_ms") -> int:
    """A dedup window in milliseconds, 0 to :data:`MAX_DEDUP_WINDOW_MS` (None: 0)."""
    if value is None:
        return 0
    number = _non_negative(value, field)
    if number > MAX_DEDUP_WINDOW_MS:
        raise ValidationError(field, f"at most {MAX_DEDUP_WINDOW_MS} ms (30 days)")
    return number


def _checked_late(late: LatePolicy | None) -> LatePolicy | None:
    """A policy built by hand is held to what parse_late accepts (it is stored)."""
    if late is None:
        return None
    if not isinstance(late, LatePolicy):
        raise ValidationError("late", "must be a LatePolicy")
    if late.kind is LateKind.FIRE:
        if late.ms != 0:
            raise ValidationError("late", "fire takes no milliseconds")
        return late
    _non_negative(late.ms, f"late.{late.kind.value}")
    return late


def _integral(value: object) -> int | None:
    """An int, or a float with no fraction (JSON's 5.0) as one; None: neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer() and _INT64_MIN <= value <= _INT64_MAX:
        return int(value)
    return value if isinstance(value, int) else None


def _non_negative(value: object, field: str) -> int:
    number = _integral(value)
    if number is None or not 0 <= number <= _INT64_MAX:
        raise ValidationError(field, "must be a non-negative integer number of milliseconds")
    return number


def _tags(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValidationError("tags", "must be a list of strings")
    if len(value) > MAX_TAGS:
        raise ValidationError("tags", f"at most {MAX_TAGS} tags, got {len(value)}")
    for index, tag in enumerate(value):
        if not isinstance(tag, str) or not TAG_PATTERN.fullmatch(tag):
            raise ValidationError(f"tags[{index}]", "must be 1-64 characters from [A-Za-z0-9._:/-]")
    return tuple(sorted(set(value)))


def _property(value: object, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not PROPERTY_PATTERN.fullmatch(value):
        raise ValidationError(field, "must be 1-255 printable ASCII characters")
    return value


def _headers(value: Mapping[str, object] | None) -> Headers:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise ValidationError("headers", "must be an object of names to values")
    if len(value) > MAX_HEADERS:
        raise ValidationError("headers", f"at most {MAX_HEADERS} headers, got {len(value)}")
    total = 0
    out: list[tuple[str, HeaderValue]] = []
    for name, given in value.items():
        _header_name(name)
        checked = _header_value(given, f"headers.{name}")
        total += len(name) + (len(checked.encode("utf-8")) if isinstance(checked, str) else 8)
        out.append((name, checked))
    if total > MAX_HEADERS_BYTES:
        raise ValidationError("headers", f"{total} bytes in all, over {MAX_HEADERS_BYTES}")
    return tuple(sorted(out))


def _header_value(value: object, field: str) -> HeaderValue:
    """A header's value as it is stored and sent (an integral float: its int)."""
    if isinstance(value, str):
        if len(value.encode("utf-8", "surrogatepass")) > MAX_HEADER_VALUE_BYTES:
            raise ValidationError(field, f"over {MAX_HEADER_VALUE_BYTES} bytes")
        _utf8(value, field)
        return value
    if isinstance(value, bool):
        return value
    number = _integral(value)
    if number is None or not _INT64_MIN <= number <= _INT64_MAX:
        raise ValidationError(field, "must be a string, a 64-bit integer or a boolean")
    return number


def _header_name(name: object) -> None:
    if not isinstance(name, str) or not HEADER_NAME_PATTERN.fullmatch(name):
        raise ValidationError("headers", "names must be 1-128 printable ASCII characters")
    if name[:2].lower() == RESERVED_HEADER_PREFIX:
        raise ValidationError(
            f"headers.{name}", "names starting with x- are reserved for the engine's headers"
        )


def _utf8(text: str, field: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(field, "is not valid UTF-8 text") from None
