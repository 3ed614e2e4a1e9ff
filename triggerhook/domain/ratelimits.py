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

A task is counted as it comes due (:meth:`Throttle.admit`, the scheduler's
thread) and again as it leaves the send buffer to be published
(:meth:`Throttle.depart`, the publisher's thread): the rate is kept where
the events' ``x-fired-ms`` is stamped, by the same clock.
"""

from __future__ import annotations

import math
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

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
# The span over which departures are counted as tasks leave the send buffer:
# a second, as the limit is promised (and judged: tests/sim/oracle_rate.py).
WINDOW_MS = 1000

# A departure may come this many tokens' time late (its way through the
# heap and the send buffer: a thread's turn, a timer's ms) without losing
# its token: so many more than the burst may leave at once after a wait
# (never more than a second allows). Measured in the simulator (10/s burst
# 2 over three instances: a token a third of a second): with 1, a backlog's
# 40th event came 7 % later than with no count as tasks leave (median of 40
# seeds, paired); with 2, 3 %; with the one-second bound alone, as soon.
_LATE_TOKENS = 2

_Kept = TypeVar("_Kept", "_Bucket", "_Leaving")


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
    why = pattern_error(pattern)
    if why is not None:
        raise ValidationError(field, why)
    assert isinstance(pattern, str)  # pattern_error said so
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


def pattern_error(pattern: object) -> str | None:
    """Why ``pattern`` is not a routing key pattern (None: it is one)."""
    if (
        isinstance(pattern, str)
        and 0 < len(pattern) <= MAX_PATTERN_CHARS
        and all(word in ("*", "#") or _WORD.fullmatch(word) for word in pattern.split("."))
    ):
        return None
    return (
        f"the pattern must be words of [A-Za-z0-9_:/-], * or # separated by dots,"
        f" at most {MAX_PATTERN_CHARS} characters"
    )


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


class _Leaving:
    """The tasks of one bucket as they leave the send buffer: a token bucket
    (``tokens`` as of ``at_ms``, never below zero), and how many left in
    each whole ms (an event's ``x-fired-ms``) over the last second and a
    ms, oldest first (at most WINDOW_MS + 1 entries)."""

    __slots__ = ("at_ms", "counts", "ms", "tokens", "total")

    def __init__(self, tokens: float, at_ms: float) -> None:
        self.tokens = tokens
        self.at_ms = at_ms
        self.ms: deque[int] = deque()
        self.counts: deque[int] = deque()
        self.total = 0

    def since(self, first_ms: int) -> int:
        """How many left from ``first_ms`` on (those before it are forgotten)."""
        while self.ms and self.ms[0] < first_ms:
            self.ms.popleft()
            self.total -= self.counts.popleft()
        return self.total

    def add(self, at_ms: int) -> None:
        """One more left at ``at_ms``, with a token."""
        self.tokens -= 1
        if self.ms and self.ms[-1] >= at_ms:  # the same ms (or the clock went back)
            self.counts[-1] += 1
        else:
            self.ms.append(at_ms)
            self.counts.append(1)
        self.total += 1

    def nth(self, count: int) -> int:
        """The ms the ``count``-th oldest departure counted left at (past
        the end: the newest's)."""
        seen = 0
        for at_ms, many in zip(self.ms, self.counts, strict=True):
            seen += many
            if seen >= count:
                return at_ms
        return self.ms[-1]


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
    (the rate errs high by that one task).

    :meth:`depart` counts each limited task a third time, as it leaves the
    send buffer to be published, by what really left: the tasks that
    :meth:`admit` let go at their instants can still leave together — a
    broker outage or a confirm stall kept them in the send buffer, a stall
    or a step forward of the clock passed the instants of several at once,
    postponed rows were armed late — and what the departures' bucket lacks
    is held back again, at the rate. Thread-safe (a lock per call:
    :meth:`admit` is the scheduler's, :meth:`depart` the publisher's
    thread); the metrics
    thread only reads :attr:`labels` and the per-label lists of the same
    length (``held_by``, ``wait_ms_by``, ``holding_by``: ints replaced
    whole, never resized), a bucket's label its pattern, or
    :data:`CATCH_UP_LABEL`."""

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
        # And as they leave the send buffer: what left over the last second (see depart).
        self._departs: dict[int | str, _Leaving] = {}
        self._lock = threading.Lock()
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
        self, tasks: Sequence[Task], now_ms: float, paced: list[Task] | None = None
    ) -> tuple[list[Task], list[tuple[Task, int]]]:
        """The tasks that go now, in order, and each held one with the
        instant (integer ms, after ``now_ms``) its token comes. With
        ``paced``, the limited tasks that go are appended there instead of
        the tasks returned (those then go unlimited): they are to be counted
        again as they leave the send buffer (:meth:`depart`).

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
        with self._lock:
            return self._admit(tasks, now_ms, paced)

    def _admit(
        self, tasks: Sequence[Task], now_ms: float, paced: list[Task] | None
    ) -> tuple[list[Task], list[tuple[Task, int]]]:
        share = min(1.0, max(0.0, self._share()))
        go: list[Task] = []
        limited = go if paced is None else paced
        held: list[tuple[Task, int]] = []
        for task in tasks:
            reserved = self._reserved.pop(task.id, None)
            if reserved is not None:
                self.holding_by[reserved[1]] -= 1
                if reserved[0] > now_ms:  # back early (R8p's): it keeps its place
                    self._hold(task, reserved, held)
                    continue
                if reserved[2]:
                    limited.append(task)  # back at its release token's instant
                    continue
                index, late = self._which(task, now_ms)
            else:
                index, late = self._which(task, now_ms)
                if index is None and not late:
                    go.append(task)  # not limited
                    continue
                if share <= 0:
                    # No share of any rate (the shard count not known yet): asks
                    # again later, holding no token.
                    held.append((task, math.ceil(now_ms) + _NO_SHARE_RECHECK_MS))
                    label = len(self._limits) if index is None else index
                    self.held_by[label] += 1
                    self.held += 1
                    continue
                queued = self._instant(index, late, task, share, now_ms, self._buckets)
                if queued is not None:
                    self._count(queued, now_ms, new=True)
                    self._hold(task, (*queued, False), held)
                    continue
            released = self._instant(index, late, task, share, now_ms, self._releases)
            if released is None:
                limited.append(task)
                continue
            self._count(released, now_ms, new=reserved is None)
            self._hold(task, (*released, True), held)
        if len(self._reserved) > _MAX_RESERVED or now_ms - self._swept_ms >= _FORGET_AFTER_MS:
            self._forget_before(now_ms - _FORGET_AFTER_MS)
            self._swept_ms = now_ms
        return go, held

    def depart(
        self, tasks: Sequence[Task], now_ms: float
    ) -> tuple[list[Task], list[tuple[Task, int]]]:
        """The limited tasks :meth:`admit` let go, as they leave the send
        buffer to be published at ``now_ms`` (by the clock their
        ``x-fired-ms`` is read from): those that go, in order, and each held
        back with the instant (integer ms, after ``now_ms``) it may come
        back at.

        Each is counted a third time, as it really leaves, by a token bucket
        of the same limit that never goes below zero (no reservation: what
        it counts left), holding :data:`_LATE_TOKENS` more than the burst
        and a ms's tokens, and over any second and a ms by no more than the
        burst and a second's tokens (this instance's share of them: the
        limit as promised) — however late or together the tasks come: out
        of a send buffer a broker outage or a confirm stall kept them in, or
        at once from the heap after a stall, a step forward of the clock or
        a late arming passed their instants. A task without its token is
        held back until the token comes (the call's first until the next
        one, its second until the one after, ...), and not before enough of
        the second's departures are a second old: back then, :meth:`admit`
        lets it go without another token, and it is counted
        here again. A task that waits like this counts as held (the wait it
        is given added), whether or not it was held before."""
        with self._lock:
            share = min(1.0, max(0.0, self._share()))
            go: list[Task] = []
            held: list[tuple[Task, int]] = []
            over: dict[int | str, int] = {}  # per bucket, tasks of this call held back
            for task in tasks:
                index, late = self._which(task, now_ms)
                if index is None and not late:
                    go.append(task)
                    continue
                if share <= 0:  # no shard held now: asks again later, holding nothing
                    held.append((task, math.ceil(now_ms) + _NO_SHARE_RECHECK_MS))
                    continue
                again = self._leave(self._named(index, late, task), share, now_ms, over)
                if again is None:
                    go.append(task)
                    continue
                self._count(again, now_ms, new=True)
                self._hold(task, (*again, True), held)
            return go, held

    def paced(self, tasks: Sequence[Task], now_ms: float) -> tuple[list[Task], list[Task]]:
        """``tasks`` split into those no limit holds at ``now_ms`` and those
        :meth:`depart` is to count (for tasks put back into the send buffer
        unpublished: a lost connection's unconfirmed ones)."""
        free: list[Task] = []
        limited: list[Task] = []
        if not self:
            return list(tasks), limited
        with self._lock:
            for task in tasks:
                index, late = self._which(task, now_ms)
                (free if index is None and not late else limited).append(task)
        return free, limited

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
        with self._lock:
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

    def _which(self, task: Task, now_ms: float) -> tuple[int | None, bool]:
        """The index of the limit of ``task``'s key (None: none), and whether
        the catch-up bucket of its key holds it too (it is late)."""
        index = self.pattern_of(task.routing_key)
        late = self._catch_up is not None and now_ms - task.due_ms > self._catch_up_after_ms
        return index, late

    def _instant(
        self,
        index: int | None,
        late: bool,
        task: Task,
        share: float,
        now_ms: float,
        buckets: dict[int | str, _Bucket],
    ) -> tuple[int, int] | None:
        """When ``task`` (of limit ``index``, ``late`` or not) may go, by
        ``buckets`` (the queue's or the releases'): None, now; else the
        instant its last token comes, and the label of the bucket that
        token is from."""
        taken: tuple[int, int] | None = None
        if index is not None:
            at_ms = self._take(buckets, index, self._limits[index], share, now_ms)
            taken = None if at_ms is None else (at_ms, index)
        if late and self._catch_up is not None:
            self._bound(buckets)
            late_ms = self._take(buckets, task.routing_key, self._catch_up, share, now_ms)
            if late_ms is not None and (taken is None or late_ms > taken[0]):
                taken = (late_ms, len(self._limits))
        return taken

    def _bound(self, buckets: dict[int | str, _Kept]) -> None:
        """The catch-up buckets (one a routing key) start over past a number of keys."""
        if len(buckets) > _MAX_CACHED_KEYS + len(self._limits):
            for key in [k for k in buckets if not isinstance(k, int)]:
                del buckets[key]

    def _named(
        self, index: int | None, late: bool, task: Task
    ) -> list[tuple[int | str, RateLimit]]:
        """The buckets (name, limit) that hold ``task``: its pattern's, its key's catch-up."""
        named: list[tuple[int | str, RateLimit]] = []
        if index is not None:
            named.append((index, self._limits[index]))
        if late and self._catch_up is not None:
            named.append((task.routing_key, self._catch_up))
        return named

    def _leave(
        self,
        named: list[tuple[int | str, RateLimit]],
        share: float,
        now_ms: float,
        over: dict[int | str, int],
    ) -> tuple[int, int] | None:
        """A task of the buckets ``named`` leaving at ``now_ms``: None, it
        goes (counted in each); else the instant it may come back at, and
        the label of the bucket that set it. ``over``: per bucket, how many
        this call held back before it."""
        at_ms = math.floor(now_ms)
        first_ms = at_ms - WINDOW_MS  # a second and a ms: x-fired-ms may be read a ms later
        found: list[_Leaving] = []
        lacking: list[tuple[int | str, RateLimit, _Leaving, int]] = []
        for name, limit in named:
            gone = self._leaving(name, limit, share, now_ms)
            allowed = max(1.0, limit.burst * share) + limit.per_s * share * (WINDOW_MS + 1) / 1000
            excess = gone.since(first_ms) + 1 - math.floor(allowed + _EPSILON)
            if excess > 0 or gone.tokens < 1 - _EPSILON:
                lacking.append((name, limit, gone, excess))
            found.append(gone)
        if not lacking:
            for gone in found:
                gone.add(at_ms)
            return None
        taken: tuple[int, int] | None = None
        for name, limit, gone, excess in lacking:
            over[name] = over.get(name, 0) + 1
            # When its token has come (the call's first held back the next
            # token, the second the one after, ...), and not before enough
            # of the second's departures are a second old.
            per_ms = limit.per_s * share / 1000
            back_ms = max(math.ceil(now_ms + (over[name] - gone.tokens) / per_ms), at_ms + 1)
            if excess > 0:
                back_ms = max(back_ms, gone.nth(excess + over[name] - 1) + WINDOW_MS + 1)
            if taken is None or back_ms > taken[0]:
                taken = (back_ms, name if isinstance(name, int) else len(self._limits))
        return taken

    def _leaving(self, name: int | str, limit: RateLimit, share: float, now_ms: float) -> _Leaving:
        """The departures of bucket ``name``, refilled up to ``now_ms``: the
        burst, a ms's tokens (the queue's instants are whole ms) and
        :data:`_LATE_TOKENS` at most."""
        if not isinstance(name, int):
            self._bound(self._departs)
        per_ms = limit.per_s * share / 1000
        most = max(1.0, limit.burst * share) + per_ms + _LATE_TOKENS
        return _kept_now(self._departs, name, _Leaving, most, per_ms, now_ms)

    def _refilled(
        self,
        buckets: dict[int | str, _Bucket],
        name: int | str,
        limit: RateLimit,
        share: float,
        now_ms: float,
    ) -> _Bucket:
        """Bucket ``name`` refilled up to ``now_ms``. The releases' buckets
        hold a millisecond's tokens more than the burst: the queue's instants
        are whole milliseconds, so the tokens of one come back together."""
        per_ms = limit.per_s * share / 1000  # > 0: admit() holds tasks back without a share
        burst = max(1.0, limit.burst * share)
        if buckets is self._releases:
            burst += per_ms
        return _kept_now(buckets, name, _Bucket, burst, per_ms, now_ms)

    def _take(
        self,
        buckets: dict[int | str, _Bucket],
        name: int | str,
        limit: RateLimit,
        share: float,
        now_ms: float,
    ) -> int | None:
        """A token of bucket ``name``: None, there is one now; else the
        instant (ms) the token taken comes (a reservation: the bucket goes
        below zero)."""
        bucket = self._refilled(buckets, name, limit, share, now_ms)
        bucket.tokens -= 1
        if bucket.tokens >= -_EPSILON:
            return None
        per_ms = limit.per_s * share / 1000
        return max(math.ceil(now_ms + -bucket.tokens / per_ms), math.floor(now_ms) + 1)


def _kept_now(
    kept: dict[int | str, _Kept],
    name: int | str,
    make: Callable[[float, float], _Kept],
    most: float,
    per_ms: float,
    now_ms: float,
) -> _Kept:
    """Bucket ``name`` of ``kept`` (made full, ``most`` tokens, if new),
    refilled at ``per_ms`` up to ``now_ms``, holding at most ``most``."""
    found = kept.get(name)
    if found is None:
        found = kept[name] = make(most, now_ms)
    if now_ms > found.at_ms:
        found.tokens = min(most, found.tokens + (now_ms - found.at_ms) * per_ms)
        found.at_ms = now_ms
    return found


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
