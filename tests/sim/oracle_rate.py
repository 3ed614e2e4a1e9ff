"""The oracle's rate check (docs/design/flow-control.md, section 3): no
limited key published above its rate * (1 + one share) over any second,
judged from the events that reached the broker (their ``x-fired-ms``) and
the shard leases the store saw each instance renew, acquire and release —
never from the engine's throttle itself.

**The bound, from the token bucket as built** (``domain/ratelimits.py``
``Throttle._take``). A limit of rate ``r``/s and burst ``b``; ``N`` shards.
Each engine (one process: a restart under the same name is another) holding
``n`` shards has the share ``s = n / N`` and a bucket of its own that

* holds at most ``max(1, b·s)`` tokens (the burst is scaled by the share,
  but never below one token), and starts full, at the share of its first take;
* refills at ``r·s`` a second, the share read at each take;
* goes below zero for a held task: its token is reserved, the task comes
  back at the instant the refill pays that debt (rounded up to the ms) and
  goes then without another token.

So one engine whose tasks each go at their token's instant lets through, in
any ``w`` ms of ``x-fired-ms``, at most ``max(1, b·s) + r·s·(w + 1)/1000``
(the ``+ 1``: instants are rounded up to the ms, ``x-fired-ms`` down). Summed
over the engines, the shares make at most 1, and while shards change hands
an old owner still counts a shard its new owner counts too (until its lease
lapses and a renewal tells it): the sum passes 1 by at most one engine's
share. Over a window, then:

    events <= sum over the engines publishing in it of max(1, b·ŝ_e)
              + r · (1 + ŝ) · (w + 1) / 1000
              + the new incarnations whose first event is in it

* ``ŝ_e``: the largest share engine ``e`` could have counted so far, from the
  store's effects: its table is at most the leases its last renewal named
  (its whole table then), plus those it acquired since, less those it
  released (it drops them before the call). A lost answer only overstates it.
  ``ŝ``: the largest ``ŝ_e`` of any engine so far (a reservation made at an
  old share can outlast it: the largest one seen is the one share).
* A new incarnation of an id (created again, or replaced) that meets its old
  incarnation's reservation goes without a token: "the rate errs high by one
  task, once" — one event each, its earliest.
* A task inherited from a lost shard takes a new token at its new owner: no
  term (the new owner's bucket counts it; the old owner's reservation is
  spent, which errs low).

Nothing else is allowed: not a held task that comes back late (its token's
instant passed while it could not go) and so goes with others whose instants
passed too. An event counts once, at its earliest ``x-fired-ms``: a re-publish
of the same revision (a dropped connection, a stale owner's duplicate) is one
task. Dead letters go to their own key and are not counted. ``catch_up_rate``
(per routing key, for late tasks) is not checked here: the simulator does not
set it.

Checked at each event as it reaches the broker, over every window
``[t_i, t_i + w)`` that starts at an event and holds the new one, with what
is known by then (a later share only raises the bound of an earlier window),
so that the run stops near the burst and its trace shows it.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from sim.broker import Published
from sim.views import Violation
from triggerhook.domain.ratelimits import RateLimit, topic_matches
from triggerhook.interfaces import Acquired, Lease

WINDOW_MS = 1000


@dataclass(slots=True)
class _Engine:
    """One process of an instance: the shards it may count now, and the most so far."""

    name: str
    shards: set[int] = field(default_factory=set)
    most: int = 0

    def count(self, shards: set[int]) -> None:
        self.shards = shards
        self.most = max(self.most, len(shards))


@dataclass(frozen=True, slots=True)
class _Event:
    fired_ms: int
    key: tuple[str, int]  # (task id, revision)
    engine: int  # index in RateCheck._engines
    incarnation: int  # of its id: 1 the first, 2 created again, ...


@dataclass(slots=True)
class _Limit:
    """One limit's events, in order of ``x-fired-ms``."""

    limit: RateLimit
    times: list[int] = field(default_factory=list)  # sorted
    keys: list[tuple[str, int]] = field(default_factory=list)  # in the order of times
    events: dict[tuple[str, int], _Event] = field(default_factory=dict)
    # (id, incarnation > 1) -> its earliest event: the one that may go without a token
    first_again: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)


class RateCheck:
    """The rate check of ``limits`` (the settings' ``rate_limits``) over
    ``shard_count`` shards; ``start_ms`` only for the messages (a time into
    the run, as the trace shows it)."""

    def __init__(
        self,
        limits: Sequence[RateLimit],
        shard_count: int,
        start_ms: float = 0.0,
        window_ms: int = WINDOW_MS,
    ) -> None:
        self._limits = [_Limit(limit) for limit in limits]
        self._shard_count = shard_count
        self._start_ms = start_ms
        self.window_ms = window_ms
        self._engines: list[_Engine] = []
        self._current: dict[str, int] = {}  # instance name -> its engine now
        self._incarnations: dict[str, int] = {}  # id -> incarnations created
        self._incarnation_of: dict[tuple[str, int], int] = {}  # (id, rev) -> incarnation
        self.checked = 0  # events judged

    # -- what the oracle tells it ----------------------------------------------------------

    def started(self, instance: str) -> None:
        """A process starts under ``instance`` (a new one, or a restart): a new bucket."""
        self._current[instance] = len(self._engines)
        self._engines.append(_Engine(instance))

    def created(self, task_id: str, rev: int) -> None:
        """A new incarnation of ``task_id`` (R6, R6r, a series' copy) at ``rev``."""
        count = self._incarnations.get(task_id, 0) + 1
        self._incarnations[task_id] = count
        self._incarnation_of[(task_id, rev)] = count

    def moved(self, task_id: str, old_rev: int, new_rev: int) -> None:
        """A revision of the same incarnation (a move, a write-back, an advance)."""
        found = self._incarnation_of.get((task_id, old_rev))
        if found is not None:
            self._incarnation_of[(task_id, new_rev)] = found

    def wrote(self, name: str, args: tuple[object, ...]) -> None:
        """The leases the store saw an instance renew (its whole table),
        acquire (from its ``acquired`` answer: see :meth:`acquired`) or release."""
        if name not in ("renew", "release") or len(args) < 2:
            return
        engine = self._engine(str(args[0]))
        leases: Sequence[Lease] = args[1]  # type: ignore[assignment]
        shards = {lease.shard for lease in leases}
        engine.count(shards if name == "renew" else engine.shards - shards)

    def acquired(self, instance: str, acquired: Sequence[Acquired]) -> None:
        engine = self._engine(instance)
        engine.count(engine.shards | {one.lease.shard for one in acquired})

    def _engine(self, instance: str) -> _Engine:
        if instance not in self._current:
            self.started(instance)
        return self._engines[self._current[instance]]

    # -- the events --------------------------------------------------------------------------

    def delivered(self, event: Published) -> None:
        """An event reached its queue: count it under its limit, and judge
        every window that holds it."""
        task = event.task
        if event.dead:
            return
        limit = self._limit_of(task.routing_key)
        if limit is None:
            return
        key = (task.id, task.rev)
        known = limit.events.get(key)
        if known is not None and known.fired_ms <= event.fired_ms:
            return  # a re-publish of a revision already counted
        if known is not None:
            at = limit.keys.index(key)
            del limit.times[at], limit.keys[at]
        self._engine(event.instance)
        one = _Event(
            event.fired_ms,
            key,
            self._current[event.instance],
            self._incarnation_of.get(key, 1),
        )
        limit.events[key] = one
        at = bisect.bisect_right(limit.times, one.fired_ms)
        limit.times.insert(at, one.fired_ms)
        limit.keys.insert(at, key)
        if one.incarnation > 1:
            again = (task.id, one.incarnation)
            earliest = limit.first_again.get(again)
            if earliest is None or limit.events[earliest].fired_ms > one.fired_ms:
                limit.first_again[again] = key
        self.checked += 1
        self._judge(limit, one.fired_ms)

    def _limit_of(self, routing_key: str) -> _Limit | None:
        """The first limit whose pattern matches, as the throttle takes it."""
        return next((x for x in self._limits if topic_matches(x.limit.pattern, routing_key)), None)

    def _judge(self, limit: _Limit, fired_ms: int) -> None:
        """Every window [t_i, t_i + w) that starts at an event and holds ``fired_ms``."""
        times, w = limit.times, self.window_ms
        first = bisect.bisect_right(times, fired_ms - w)
        last = bisect.bisect_right(times, fired_ms)
        for anchor in range(first, last):
            start_ms = times[anchor]
            end = bisect.bisect_left(times, start_ms + w)
            inside = [limit.events[k] for k in limit.keys[anchor:end]]
            allowed, terms = self.bound(limit, inside)
            if len(inside) > allowed:
                raise Violation(self._message(limit, start_ms, inside, allowed, terms))

    def bound(self, limit: _Limit, inside: Sequence[_Event]) -> tuple[float, str]:
        """The most events the window of ``inside`` may hold, and its terms."""
        rate = limit.limit
        engines = sorted({e.engine for e in inside})
        shares = [self._engines[e].most / self._shard_count for e in engines]
        largest = max((x.most for x in self._engines), default=0) / self._shard_count
        bursts = sum(max(1.0, rate.burst * share) for share in shares)
        flow = rate.per_s * (1 + largest) * (self.window_ms + 1) / 1000
        again = sum(1 for e in inside if limit.first_again.get((e.key[0], e.incarnation)) == e.key)
        terms = (
            f"bursts {bursts:.2f} ({len(engines)} engines, shares {[round(s, 2) for s in shares]})"
            f" + {rate.per_s:g}/s * (1 + largest share {largest:.2f}) * {self.window_ms + 1} ms"
            f" = {flow:.2f} + {again} new incarnations"
        )
        return bursts + flow + again, terms

    def _message(
        self, limit: _Limit, start_ms: int, inside: Sequence[_Event], allowed: float, terms: str
    ) -> str:
        names = [
            f"{e.key[0]}@{self._engines[e.engine].name}+{e.fired_ms - start_ms}" for e in inside
        ]
        shown = ", ".join(names[:40]) + (", ..." if len(names) > 40 else "")
        return (
            f"rate: {len(inside)} events of {limit.limit.pattern!r} ({limit.limit.per_s:g}/s burst"
            f" {limit.limit.burst}) fired within {self.window_ms} ms from x-fired-ms {start_ms}"
            f" ({start_ms - self._start_ms:.0f} ms into the run), at most {allowed:.2f} allowed:"
            f" {terms}; id@instance+ms: {shown}"
        )
