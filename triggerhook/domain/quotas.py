"""Quotas per namespace (docs/design/shared-service.md, section 1): pure, no
I/O, no clock of its own.

A ``[[namespace]]`` of the namespaces file may bound what its tokens create:

* ``max_payload_bytes``: one task's payload; a create over it is invalid
  (field ``payload``), as over the daemon's own ``max_payload_bytes``;
* ``create_rate``: creates a second, in the rate limits' syntax (``"200/s"``,
  ``"600/m burst 50"``: :func:`~triggerhook.domain.ratelimits.parse_rate`),
  kept by a token bucket per namespace in each API process, each holding its
  share (the rate over the API processes of the daemon);
* ``max_pending``: the namespace's stored tasks (ids with its prefix).
  Counted in the database at most once a second per process, and only once
  the count so far, with the creates since counted forward, nears the quota
  (:data:`RECOUNT_FROM`): between counts a process sees its own creates, not
  the fires that made room nor another process's creates, so a flood may
  pass the quota by what the processes let through in a second.

A create over ``create_rate`` or ``max_pending`` is :class:`OverQuota`: not
now (HTTP 429). A batch is admitted whole or refused whole; one that no wait
would let through (more tasks than the bucket holds, or than
``max_pending``) is invalid instead. Tokens of every namespace
(``api_token``) have no quota. A series counts as one create.

:class:`Quotas` is the state of one process; its caller serializes the calls
(:class:`triggerhook.api.quotas.QuotaKeeper`, under its lock), and makes
the counts it asks for (:meth:`Quotas.count_due`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from triggerhook.domain.listing import MAX_COUNT_UP_TO
from triggerhook.domain.ratelimits import RateLimit, parse_rate
from triggerhook.errors import ConfigError, OverQuota, ValidationError

QUOTA_KEYS = ("max_pending", "create_rate", "max_payload_bytes")
RECOUNT_MS = 1000  # a process counts a namespace's tasks at most this often
# A count is asked for once the estimate passes this share of max_pending, so
# that a refusal is rarely the first to see it.
RECOUNT_FROM = 0.9
_EPSILON = 1e-9  # a token whole but for the floats' rounding counts


@dataclass(frozen=True, slots=True)
class Quota:
    """A namespace's bounds; None: none."""

    max_pending: int | None = None
    create_rate: RateLimit | None = None
    max_payload_bytes: int | None = None

    def __bool__(self) -> bool:
        return self.max_pending is not None or self.create_rate is not None

    def check_payload(self, space: str, size_bytes: int, field: str) -> None:
        most = self.max_payload_bytes
        if most is not None and size_bytes > most:
            raise ValidationError(
                field,
                f"is {size_bytes} bytes, over namespace {space!r}'s max_payload_bytes of {most}",
            )


NO_QUOTA = Quota()


def parse_quota(entry: Mapping[str, object], where: str) -> Quota:
    """The quota keys of a ``[[namespace]]`` entry; ConfigError names ``where.key``."""
    rate_text = entry.get("create_rate")
    rate = None
    if rate_text is not None:
        if not isinstance(rate_text, str):
            raise ConfigError(f'{where}.create_rate: a string such as "200/s"')
        try:
            rate = parse_rate(rate_text, "create_rate")
        except ValidationError as exc:
            raise ConfigError(f"{where}.create_rate: {exc.message}") from None
    return Quota(
        _count(entry, where, "max_pending", MAX_COUNT_UP_TO - 1),
        rate,
        _count(entry, where, "max_payload_bytes", 2**31 - 1),
    )


def _count(entry: Mapping[str, object], where: str, key: str, most: int) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ConfigError(f"{where}.{key}: an integer from 1 to {most:,}")
    return value


class _Kept:
    """One namespace's state in this process."""

    __slots__ = ("at_ms", "counted_at_ms", "counting", "pending", "since_count", "tokens")

    def __init__(self, tokens: float, now_ms: float) -> None:
        self.tokens = tokens  # of the create bucket, as of at_ms
        self.at_ms = now_ms
        self.pending: int | None = None  # the last count and the creates since; None: none yet
        self.counted_at_ms = -float("inf")
        self.counting = False  # a count was asked for and has not come back
        self.since_count = 0  # creates admitted since the count in flight was asked for


class Quotas:
    """The create buckets and pending estimates of one process's namespaces;
    ``share``: this process's part of each ``create_rate`` (1 / API processes)."""

    def __init__(self, share: float = 1.0) -> None:
        self._share = share
        self._kept: dict[str, _Kept] = {}

    def count_due(self, space: str, quota: Quota, creates: int, now_ms: float) -> bool:
        """Whether to count namespace ``space``'s stored tasks before
        admitting ``creates`` more: none counted yet, or the estimate near
        ``max_pending``, and no count in flight nor made in the last
        :data:`RECOUNT_MS`. True: the caller makes the count and calls
        :meth:`counted` (or :meth:`count_failed`) with it."""
        if quota.max_pending is None:
            return False
        kept = self._state(space, quota, now_ms)
        estimate = kept.pending
        due = (
            not kept.counting
            and now_ms - kept.counted_at_ms >= RECOUNT_MS
            and (estimate is None or estimate + creates > quota.max_pending * RECOUNT_FROM)
        )
        if due:
            kept.counting = True
            kept.since_count = 0
        return due

    def admit(self, space: str, quota: Quota, creates: int, now_ms: float) -> None:
        """Admit ``creates`` tasks of namespace ``space``, or raise
        :class:`OverQuota` (not now) or :class:`ValidationError` (never, as
        is); a refusal takes nothing."""
        if not quota:
            return
        kept = self._state(space, quota, now_ms)
        self._check_pending(space, quota.max_pending, kept, creates)
        self._take(space, quota.create_rate, kept, creates, now_ms)
        if kept.pending is not None:
            kept.pending += creates
        kept.since_count += creates

    def counted(self, space: str, pending: int, now_ms: float) -> None:
        """The count :meth:`count_due` asked for: ``pending`` tasks. The
        creates admitted since it was asked for are added (some may be in it:
        an estimate over, never under, what is stored)."""
        kept = self._kept.get(space)
        if kept is None:
            return
        kept.pending = pending + kept.since_count
        kept.counted_at_ms = now_ms
        kept.counting = False

    def count_failed(self, space: str, now_ms: float) -> None:
        """The count did not come back; another may be asked for a second later."""
        kept = self._kept.get(space)
        if kept is not None:
            kept.counted_at_ms = now_ms
            kept.counting = False

    def _state(self, space: str, quota: Quota, now_ms: float) -> _Kept:
        kept = self._kept.get(space)
        if kept is None:
            kept = self._kept[space] = _Kept(self._capacity(quota.create_rate), now_ms)
        return kept

    @staticmethod
    def _check_pending(space: str, most: int | None, kept: _Kept, creates: int) -> None:
        if most is None:
            return
        if creates > most:
            raise ValidationError(
                "tasks", f"{creates} tasks are more than namespace {space!r}'s max_pending {most}"
            )
        estimate = kept.pending
        if estimate is not None and estimate + creates > most:
            raise OverQuota(
                f"namespace {space!r} holds {estimate:,} pending tasks of its max_pending"
                f" {most:,}; retry when some have fired or are cancelled"
            )

    def _capacity(self, rate: RateLimit | None) -> float:
        """The most tokens this process's bucket holds: its share of the burst."""
        return 0.0 if rate is None else max(1.0, rate.burst * self._share)

    def _take(
        self, space: str, rate: RateLimit | None, kept: _Kept, creates: int, now_ms: float
    ) -> None:
        """``creates`` tokens of the bucket, or OverQuota (none taken).
        Kept here, not with the rate limits' buckets: those hold tasks back
        until their token comes; these refuse at once."""
        if rate is None:
            return
        capacity = self._capacity(rate)
        if creates > capacity:
            raise ValidationError(
                "tasks",
                f"{creates} tasks are more than namespace {space!r} may create at once"
                f" ({int(capacity)}: its create_rate's burst, this process's share)",
            )
        per_ms = rate.per_s * self._share / 1000
        if now_ms > kept.at_ms:
            kept.tokens = min(capacity, kept.tokens + (now_ms - kept.at_ms) * per_ms)
            kept.at_ms = now_ms
        if kept.tokens + _EPSILON < creates:
            part = "" if self._share == 1 else f", {self._share:.3g} of it in this process"
            raise OverQuota(
                f"namespace {space!r} is over its create_rate of {_rate_text(rate)}{part};"
                " retry later"
            )
        kept.tokens -= creates


def _rate_text(rate: RateLimit) -> str:
    """``rate`` in the largest unit that makes it at least 1 (``"1/h burst 3"``)."""
    for unit, seconds in (("s", 1), ("m", 60)):
        if rate.per_s * seconds >= 1:
            return f"{rate.per_s * seconds:g}/{unit} burst {rate.burst}"
    return f"{rate.per_s * 3600:g}/h burst {rate.burst}"
