"""Rate limits per routing-key pattern (docs/design/flow-control.md, section 3):
pure, no I/O, no clock of its own.

The setting ``rate_limits = "billing.*=200/s, #=20000/s"`` (:func:`parse_rate_list`):
a token bucket per pattern, refilled at its rate, holding at most its burst
(one second's tokens unless given: ``"200/s burst 50"``). The patterns are
AMQP topic patterns (``*`` one word, ``#`` zero or more); a routing key takes
the first pattern that matches it, in the order written, and a key no pattern
matches is not limited. ``catch_up_rate`` (:func:`parse_rate`): a bucket per
routing key for the tasks found late by more than ``catch_up_after_ms``. A
task whose bucket is empty is held back until its token comes: late, never
early (the scheduler pushes it back into its heap for then).

Each instance limits its own share, the rate times the fraction of the shards
it holds (a key's tasks spread over every shard by the hash of their ids), so
that the instances together keep to the rate without a word between them;
while shards change hands the sum may pass it by one share, for a lease time.

A :class:`Throttle` belongs to the one thread that calls :meth:`Throttle.admit`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from triggerhook.domain.task import Task
from triggerhook.errors import ValidationError

# A routing key's words: what a pattern's words match (AMQP topic exchanges).
_WORD = re.compile(r"[A-Za-z0-9_:/-]+")
_RATE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*/\s*(s|m|h)\s*(?:burst\s+([0-9]+)\s*)?", re.I)
_PER_S = {"s": 1.0, "m": 1 / 60, "h": 1 / 3600}
MAX_PATTERNS = 64
MAX_PATTERN_CHARS = 255
# Routing keys whose pattern is remembered; past it the memory starts over
# (a flood of distinct keys costs a lookup each, never memory).
_MAX_CACHED_KEYS = 10_000
# Reservations whose instant passed _FORGET_AFTER_MS ago are forgotten: their
# task never came back (dropped on a way that did not call forget(), or
# postponed to the database and cancelled there). Looked for every
# _FORGET_AFTER_MS, and at once past _MAX_RESERVED held tasks.
_MAX_RESERVED = 1_000_000
_FORGET_AFTER_MS = 600_000
# With no share of the rates (the shard count not yet known), a limited task
# looks again this much later.
_NO_SHARE_RECHECK_MS = 1000
# Tokens are floats: a token whole but for rounding counts (a random
# search found a refilled bucket at 1 - 1.1e-16).
_EPSILON = 1e-9
# The metrics label of the catch-up bucket (not a valid pattern: no clash).
CATCH_UP_LABEL = "(catch_up)"


@dataclass(frozen=True, slots=True)
class RateLimit:
    """One pattern's limit: ``per_s`` tokens a second, at most ``burst`` held."""

    pattern: str
    per_s: float
    burst: int


def parse_rate_limits(value: object, field: str = "rate_limits") -> tuple[RateLimit, ...]:
    """The limits a table of ``pattern = "N/s"`` (or ``/m``, ``/h``, and
    ``burst B``) gives, in the order written; ValidationError names the entry."""
    if not isinstance(value, Mapping):
        raise ValidationError(field, 'must be a table of pattern = "rate", e.g. "200/s"')
    if len(value) > MAX_PATTERNS:
        raise ValidationError(field, f"at most {MAX_PATTERNS} patterns, got {len(value)}")
    return tuple(_limit(pattern, rate, f"{field}.{pattern}") for pattern, rate in value.items())


def _limit(pattern: object, rate: object, field: str) -> RateLimit:
    if not isinstance(pattern, str) or not _valid_pattern(pattern):
        raise ValidationError(
            field, "the pattern must be words of [A-Za-z0-9_:/-], * or # separated by dots"
        )
    found = _RATE.fullmatch(rate) if isinstance(rate, str) else None
    if found is None:
        raise ValidationError(field, 'must be "N/s", "N/m" or "N/h", optionally "burst B"')
    per_s = float(found.group(1)) * _PER_S[found.group(2).lower()]
    if not per_s > 0:
        raise ValidationError(field, "the rate must be above 0")
    burst = int(found.group(3)) if found.group(3) else max(1, math.ceil(per_s))
    if burst < 1:
        raise ValidationError(field, "the burst must be at least 1")
    return RateLimit(pattern, per_s, burst)


def _valid_pattern(pattern: str) -> bool:
    if not 0 < len(pattern) <= MAX_PATTERN_CHARS:
        return False
    return all(word in ("*", "#") or _WORD.fullmatch(word) for word in pattern.split("."))


def topic_matches(pattern: str, key: str) -> bool:
    """Whether an AMQP topic ``pattern`` matches routing key ``key``: ``*``
    one word, ``#`` zero or more. Linear in the words (the few ``#`` of a
    pattern each try the rest once, memoized)."""
    words, keys = pattern.split("."), key.split(".")
    seen: dict[tuple[int, int], bool] = {}

    def match(w: int, k: int) -> bool:
        if (w, k) in seen:
            return seen[(w, k)]
        if w == len(words):
            result = k == len(keys)
        elif words[w] == "#":
            result = match(w + 1, k) or (k < len(keys) and match(w, k + 1))
        elif k < len(keys) and words[w] in ("*", keys[k]):
            result = match(w + 1, k + 1)
        else:
            result = False
        seen[(w, k)] = result
        return result

    return match(0, 0)


class _Bucket:
    """Tokens of one pattern: ``tokens`` as of ``at_ms``, refilled lazily; below
    zero, the tokens held tasks have taken ahead of their time."""

    __slots__ = ("at_ms", "tokens")

    def __init__(self, tokens: float, at_ms: float) -> None:
        self.tokens = tokens
        self.at_ms = at_ms


class Throttle:
    """The token buckets of ``limits`` at this instance's ``share()`` of each
    rate (0-1: the fraction of the shards it holds), and of ``catch_up``: a
    limit on every routing key, for the tasks found more than
    ``catch_up_after_ms`` past their due time (the backlog an outage leaves).

    :meth:`admit` splits the tasks due now into those that go and those held
    back until their token comes; a held task takes its token then and there
    (a place in its bucket's queue), so that it is held once, however long
    the queue: when it comes back at its instant it goes without another.
    The reservation is the id's, not the revision's: a held task postponed
    to the database (R8p) comes back re-armed at a new revision. A new
    incarnation of the id meeting an old reservation goes without a token
    (the rate errs high by that one task). Not thread-safe: the scheduler
    thread owns it; the metrics thread only reads :attr:`labels` and the
    per-label lists of the same length (``held_by``, ``wait_ms_by``,
    ``holding_by``: ints replaced whole, never resized), a bucket's label its
    pattern, or :data:`CATCH_UP_LABEL`."""

    def __init__(
        self,
        limits: Sequence[RateLimit],
        share: Callable[[], float],
        catch_up: RateLimit | None = None,
        catch_up_after_ms: int = 1000,
    ) -> None:
        self._limits = tuple(limits)
        self._share = share
        self._catch_up = catch_up
        self._catch_up_after_ms = catch_up_after_ms
        self._buckets: dict[int | str, _Bucket] = {}  # a limit's index, or a key's catch-up
        # The same limits counted again as tasks go (see admit).
        self._releases: dict[int | str, _Bucket] = {}
        self._pattern_of: dict[str, int | None] = {}
        # The id of each held task -> the instant its token comes, the index in
        # labels of the bucket that set it, and whether it is a release token.
        self._reserved: dict[str, tuple[int, int, bool]] = {}
        self._swept_ms = -math.inf  # when reservations long past were last forgotten
        self.held = 0  # tasks held back, since start: once each, however often back early
        # Per bucket (the metrics' ``pattern`` label), lists of a fixed length
        # that other threads may read: tasks held since start, the wait added
        # to them (ms, from when they were held), and tasks held now.
        self.labels = tuple(limit.pattern for limit in self._limits)
        if catch_up is not None:
            self.labels += (CATCH_UP_LABEL,)
        self.held_by = [0] * len(self.labels)
        self.wait_ms_by = [0] * len(self.labels)
        self.holding_by = [0] * len(self.labels)

    def __bool__(self) -> bool:
        return bool(self._limits) or self._catch_up is not None

    def __len__(self) -> int:
        """Tasks held back now (their token still to come, or not yet back:
        in memory, or postponed to the database)."""
        return len(self._reserved)

    def pattern_of(self, key: str) -> int | None:
        """The index of the first limit whose pattern matches ``key`` (None: none)."""
        if key in self._pattern_of:
            return self._pattern_of[key]
        found = next(
            (i for i, limit in enumerate(self._limits) if topic_matches(limit.pattern, key)),
            None,
        )
        if len(self._pattern_of) >= _MAX_CACHED_KEYS:
            self._pattern_of.clear()
        self._pattern_of[key] = found
        return found

    def admit(
        self, tasks: Sequence[Task], now_ms: float
    ) -> tuple[list[Task], list[tuple[Task, int]]]:
        """The tasks that go now, in order, and each held one with the
        instant (integer ms, after ``now_ms``) its token comes.

        A task takes two tokens of its buckets: one when it first comes (its
        place in the queue: held until that token's instant, once), and one
        of the same limit counted again as it goes. Back on time, the second
        is there (the first ones' instants are spaced at the rate); back
        late — the scheduler stalled, a broker outage filled the send
        buffer, a postponed row was armed late — tasks whose instants passed
        meanwhile would go together, above the rate: the second count holds
        them back once more, at the rate, each with a reservation of it."""
        if not self:
            return list(tasks), []
        share = min(1.0, max(0.0, self._share()))
        go: list[Task] = []
        held: list[tuple[Task, int]] = []
        for task in tasks:
            reserved = self._reserved.pop(task.id, None)
            if reserved is not None:
                self.holding_by[reserved[1]] -= 1
                if reserved[0] > now_ms:  # back early (R8p's): it keeps its place
                    self._hold(task, reserved, held)
                    continue
                if reserved[2]:
                    go.append(task)  # back at its release token's instant
                    continue
            elif share <= 0 and (label := self._limited(task, now_ms)) is not None:
                # No share of any rate (the shard count not known yet): asks
                # again later, holding no token.
                held.append((task, math.ceil(now_ms) + _NO_SHARE_RECHECK_MS))
                self.held_by[label] += 1
                self.held += 1
                continue
            else:
                queued = self._instant(task, share, now_ms, self._buckets)
                if queued is not None:
                    self._count(queued, now_ms, new=True)
                    self._hold(task, (*queued, False), held)
                    continue
            released = self._instant(task, share, now_ms, self._releases)
            if released is None:
                go.append(task)
                continue
            self._count(released, now_ms, new=reserved is None)
            self._hold(task, (*released, True), held)
        if len(self._reserved) > _MAX_RESERVED or now_ms - self._swept_ms >= _FORGET_AFTER_MS:
            self._forget_before(now_ms - _FORGET_AFTER_MS)
            self._swept_ms = now_ms
        return go, held

    def _hold(
        self, task: Task, reserved: tuple[int, int, bool], held: list[tuple[Task, int]]
    ) -> None:
        self._reserved[task.id] = reserved
        self.holding_by[reserved[1]] += 1
        held.append((task, reserved[0]))

    def _count(self, taken: tuple[int, int], now_ms: float, new: bool) -> None:
        """A hold's figures: the wait it adds, and (``new``) the task held."""
        if new:
            self.held_by[taken[1]] += 1
            self.held += 1
        self.wait_ms_by[taken[1]] += max(0, taken[0] - math.floor(now_ms))

    def forget(self, tasks: Sequence[Task]) -> None:
        """Held tasks that will not come back (their shard was lost)."""
        for task in tasks:
            reserved = self._reserved.pop(task.id, None)
            if reserved is not None:
                self.holding_by[reserved[1]] -= 1

    def _forget_before(self, instant_ms: float) -> None:
        """Reservations whose task never came back by ``instant_ms``: dropped
        by a path that did not say so. Its token is spent: the rate errs low."""
        kept = {key: taken for key, taken in self._reserved.items() if taken[0] >= instant_ms}
        holding = [0] * len(self.labels)
        for _at_ms, label, _release in kept.values():
            holding[label] += 1
        self._reserved = kept
        self.holding_by[:] = holding  # in place: the list other threads read

    def _limited(self, task: Task, now_ms: float) -> int | None:
        """The label of a bucket that limits ``task`` now (None: none)."""
        index = self.pattern_of(task.routing_key)
        if index is not None:
            return index
        late = now_ms - task.due_ms > self._catch_up_after_ms
        return len(self._limits) if self._catch_up is not None and late else None

    def _instant(
        self, task: Task, share: float, now_ms: float, buckets: dict[int | str, _Bucket]
    ) -> tuple[int, int] | None:
        """When ``task`` may go, by ``buckets`` (the queue's or the
        releases'): None, now; else the instant its last token comes, and
        the label of the bucket that token is from."""
        taken: tuple[int, int] | None = None
        index = self.pattern_of(task.routing_key)
        if index is not None:
            at_ms = self._take(buckets, index, self._limits[index], share, now_ms)
            taken = None if at_ms is None else (at_ms, index)
        if self._catch_up is not None and now_ms - task.due_ms > self._catch_up_after_ms:
            if len(buckets) > _MAX_CACHED_KEYS + len(self._limits):
                for key in [k for k in buckets if not isinstance(k, int)]:
                    del buckets[key]
            late_ms = self._take(buckets, task.routing_key, self._catch_up, share, now_ms)
            if late_ms is not None and (taken is None or late_ms > taken[0]):
                taken = (late_ms, len(self._limits))
        return taken

    def _take(
        self,
        buckets: dict[int | str, _Bucket],
        name: int | str,
        limit: RateLimit,
        share: float,
        now_ms: float,
    ) -> int | None:
        """A token of bucket ``name``: None, there is one now; else the
        instant (ms) the token taken comes. The releases' buckets hold a
        millisecond's tokens more than the burst: the queue's instants are
        whole milliseconds, so the tokens of one come back together."""
        per_ms = limit.per_s * share / 1000  # > 0: admit() holds tasks back without a share
        burst = max(1.0, limit.burst * share)
        if buckets is self._releases:
            burst += per_ms
        bucket = buckets.get(name)
        if bucket is None:
            bucket = buckets[name] = _Bucket(burst, now_ms)
        if now_ms > bucket.at_ms:
            bucket.tokens = min(burst, bucket.tokens + (now_ms - bucket.at_ms) * per_ms)
            bucket.at_ms = now_ms
        bucket.tokens -= 1
        if bucket.tokens >= -_EPSILON:
            return None
        return max(math.ceil(now_ms + -bucket.tokens / per_ms), math.floor(now_ms) + 1)


def parse_rate_list(text: str, field: str = "rate_limits") -> tuple[RateLimit, ...]:
    """``"billing.*=200/s, mail.#=600/m burst 5"``: the limits of a setting,
    in the order written; ValidationError names the setting and the entry."""
    table: dict[str, str] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        pattern, equals, rate = (piece.strip() for piece in entry.partition("="))
        if not equals:
            raise ValidationError(
                field, f'{entry!r}: expected "pattern=rate", e.g. "billing.*=200/s"'
            )
        if pattern in table:
            raise ValidationError(f"{field}.{pattern}", "given twice")
        table[pattern] = rate
    return parse_rate_limits(table, field)


def parse_rate(text: str, field: str) -> RateLimit | None:
    """One rate (``"1000/s burst 100"``) for every key, or None for empty text."""
    return _limit("#", text, field) if text.strip() else None
