"""Observing shard ownership and who published what, for the fault tests.

* :class:`ShardWatch`: a thread that reads ``th_shards`` every few
  milliseconds, with the database's time in the same query, and keeps every
  tenure (shard, owner, epoch) it saw: since when, the latest lease end seen,
  until when. From it: takeover and rebalance times, and whether an instance
  held a lease on a shard at a given database time (R4, checked against the
  events' ``x-fired-ms``).
* :class:`EventLog`: one consumer thread per exchange. A fault test gives
  each daemon its own exchange, so every event says which instance published
  it (the events carry no instance header), and stamps receipts as they come.
* :func:`armed_in_shards_of`: the rows armed now in the shards an instance
  owns: what it may have in flight (published, unconfirmed or undeleted).
* :func:`instance_names`: per-test exchange/queue names for several daemons,
  deleted afterwards.

Database time and this test's clock are the same host clock here (MariaDB
runs locally), so receipt stamps compare with due times directly.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import pika.exceptions

from support.amqp import AmqpNames, EventConsumer, Received, delete_topology
from support.daemon import TaskTable
from support.mysql import ARMED_IDS
from support.names import unique_name
from support.waiting import wait_until
from triggerhook.domain.arming import shard_of

# The database's clock in epoch milliseconds (as the engine computes "now").
NOW_MS_SQL = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"
SHARD_COUNT = 64  # the schema's default, which the tests' databases get


def db_now_ms(table: TaskTable) -> int:
    return int(table.query(f"SELECT {NOW_MS_SQL}")[0][0])


def armed_in_shards_of(table: TaskTable, owner: str) -> set[str]:
    """Ids of the rows armed now (by their shards' marks) in the shards ``owner`` holds."""
    rows = table.query(f"{ARMED_IDS} AND s.owner = %s", (owner,))
    return {str(r[0]) for r in rows}


def shards_of(table: TaskTable, owner: str) -> dict[int, tuple[int, int]]:
    """shard -> (epoch, lease_until_ms) of the shards ``owner`` holds now."""
    return {s: (e, u) for s, (o, e, u) in table.shards().items() if o == owner}


def task_shard(task_id: str) -> int:
    return shard_of(task_id, SHARD_COUNT)


# -- shard tenures ----------------------------------------------------------------------


@dataclass
class Tenure:
    """One (shard, epoch) as seen by the watch: ``owner`` None after a release."""

    shard: int
    owner: str | None
    epoch: int
    after_ms: int  # the last sample before it was seen: it began after this
    seen_ms: int  # the first sample that showed it
    lease_until_ms: int  # the latest lease end seen for it
    last_ms: int  # the last sample that showed it
    ended_ms: int | None = None  # the first sample showing the shard's next state


class ShardWatch:
    """Reads ``th_shards`` every ``interval_s`` in a thread (a context manager).

    Sample times are the database's (``NOW_MS_SQL`` in the same statement).
    """

    def __init__(self, database_url: str, interval_s: float = 0.01) -> None:
        self._database_url = database_url
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._tenures: dict[int, list[Tenure]] = {}
        self._samples: list[tuple[int, dict[int, str | None]]] = []  # owner changes only
        self._last_sample_ms = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shard-watch", daemon=True)
        self.errors: list[BaseException] = []
        self.reads = 0

    def __enter__(self) -> ShardWatch:
        self._thread.start()
        if not wait_until(lambda: self.reads > 0, 10):
            raise AssertionError(f"the shard watch read nothing: {self.errors}")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        try:
            with TaskTable(self._database_url) as table:
                while not self._stop.is_set():
                    rows = table.query(
                        f"SELECT {NOW_MS_SQL}, shard, owner, epoch, lease_until_ms FROM th_shards"
                    )
                    self._record(rows)
                    self._stop.wait(self._interval_s)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def _record(self, rows: Sequence[tuple[object, ...]]) -> None:
        if not rows:
            return
        at_ms = int(str(rows[0][0]))
        owners: dict[int, str | None] = {}
        with self._lock:
            for _, shard_v, owner_v, epoch_v, until_v in rows:
                shard, epoch, until = int(str(shard_v)), int(str(epoch_v)), int(str(until_v))
                owner = None if owner_v is None else str(owner_v)
                owners[shard] = owner
                tenures = self._tenures.setdefault(shard, [])
                last = tenures[-1] if tenures else None
                if last is not None and (last.owner, last.epoch) == (owner, epoch):
                    last.lease_until_ms = max(last.lease_until_ms, until)
                    last.last_ms = at_ms
                    continue
                if last is not None:
                    last.ended_ms = at_ms
                after = last.last_ms if last is not None else self._last_sample_ms
                tenures.append(Tenure(shard, owner, epoch, after, at_ms, until, at_ms))
            if not self._samples or self._samples[-1][1] != owners:
                self._samples.append((at_ms, owners))
            self._last_sample_ms = at_ms
            self.reads += 1

    # -- questions --------------------------------------------------------------------

    def tenures(self, shard: int | None = None) -> list[Tenure]:
        with self._lock:
            if shard is not None:
                return list(self._tenures.get(shard, []))
            return [t for ts in self._tenures.values() for t in ts]

    def counts(self) -> dict[str | None, int]:
        """owner -> shards, as last read."""
        with self._lock:
            owners = self._samples[-1][1] if self._samples else {}
        return dict(Counter(owners.values()))

    def first_time(
        self, test: Callable[[Mapping[int, str | None]], bool], since_ms: int = 0
    ) -> int | None:
        """The first database time at or after ``since_ms`` at which ``test``
        held for the owners then (shard -> owner), as sampled: ``since_ms``
        itself when the state then already passed it; None: not yet."""
        with self._lock:
            samples = list(self._samples)
        current: dict[int, str | None] | None = None
        for at_ms, owners in samples:
            if at_ms >= since_ms:
                if current is not None and test(current):
                    return since_ms
                break
            current = owners
        else:
            if current is not None and test(current):
                return since_ms
            return None
        return next((at for at, owners in samples if at >= since_ms and test(owners)), None)

    def wait_for(
        self, test: Callable[[Mapping[int, str | None]], bool], timeout_s: float, since_ms: int = 0
    ) -> int | None:
        """Wait (up to ``timeout_s``) for :meth:`first_time`; its result."""
        found: list[int] = []

        def check() -> bool:
            at = self.first_time(test, since_ms)
            if at is not None:
                found.append(at)
            return at is not None

        wait_until(check, timeout_s, interval_s=0.02)
        return found[0] if found else None

    def held(self, owner: str, shard: int, at_ms: int) -> bool:
        """``owner`` held a lease on ``shard`` valid at database time ``at_ms``:
        a tenure of it that began before ``at_ms`` (after its ``after_ms``, the
        sample before it showed) and whose latest lease end seen is not before."""
        return any(
            t.owner == owner and t.after_ms <= at_ms <= t.lease_until_ms
            for t in self.tenures(shard)
        )

    def lease_end(self, owner: str, shard: int, at_ms: int) -> int | None:
        """The latest lease end seen of the last tenure of ``owner`` on
        ``shard`` that had begun by ``at_ms`` (None: none)."""
        begun = [
            t.lease_until_ms
            for t in self.tenures(shard)
            if t.owner == owner and t.after_ms <= at_ms
        ]
        return begun[-1] if begun else None


def balanced(owners: Mapping[int, str | None], names: Iterable[str]) -> bool:
    """Every shard owned, by ``names`` only, none holding more than its fair
    share ``ceil(N / M)`` (R2; so each holds at least ``N - (M - 1) * fair``:
    64 shards over three instances settle as 22, 22 and 20)."""
    wanted = list(names)
    counts = Counter(owners.values())
    if None in counts or set(counts) - set(wanted):
        return False
    fair = -(-len(owners) // len(wanted))
    return all(0 < counts.get(name, 0) <= fair for name in wanted)


def owned_by(owners: Mapping[int, str | None], shards: Iterable[int], names: Iterable[str]) -> bool:
    allowed = set(names)
    return all(owners.get(s) in allowed for s in shards)


# -- events by publisher ------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """An event and the instance that published it (by its exchange)."""

    by: str
    received: Received

    @property
    def id(self) -> str:
        return self.received.message_id or ""

    def header(self, name: str) -> int:
        value = self.received.headers.get(name)
        assert isinstance(value, int) and not isinstance(value, bool), (name, value, self)
        return value

    @property
    def fired_ms(self) -> int:
        return self.header("x-fired-ms")

    @property
    def due_ms(self) -> int:
        return self.header("x-due-ms")

    @property
    def rev(self) -> int:
        return self.header("x-rev")

    @property
    def received_ms(self) -> int:
        return self.received.received_ms

    @property
    def body(self) -> bytes:
        return self.received.body


@dataclass
class _Feed:
    label: str
    consumer: EventConsumer
    thread: threading.Thread | None = None


class EventLog:
    """Consumes every exchange of ``names`` (label -> names), each in its own
    thread, from :meth:`__enter__` on (the queues are declared before it
    returns, so nothing published afterwards is missed)."""

    def __init__(self, amqp_url: str, names: Mapping[str, AmqpNames]) -> None:
        self._feeds = [_Feed(label, EventConsumer(amqp_url, n)) for label, n in names.items()]
        self._events: list[Event] = []
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self.errors: list[BaseException] = []

    def __enter__(self) -> EventLog:
        for feed in self._feeds:
            feed.consumer.declare()
        for feed in self._feeds:
            feed.thread = threading.Thread(
                target=self._run, args=(feed,), name=f"events-{feed.label}", daemon=True
            )
            feed.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for feed in self._feeds:
            if feed.thread is not None:
                feed.thread.join(10)
            feed.consumer.close()

    def _run(self, feed: _Feed) -> None:
        try:
            while not self._stop.is_set():
                batch = feed.consumer.collect(1000, timeout_s=0.05)
                if batch:
                    with self._cond:
                        self._events.extend(Event(feed.label, r) for r in batch)
                        self._cond.notify_all()
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def events(self) -> list[Event]:
        with self._cond:
            return list(self._events)

    def __len__(self) -> int:
        with self._cond:
            return len(self._events)

    def wait(self, test: Callable[[list[Event]], bool], timeout_s: float) -> bool:
        """Wait until ``test(events so far)`` holds (True) or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not test(self._events):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
            return True

    def wait_ids(self, ids: Iterable[str], timeout_s: float) -> bool:
        wanted = set(ids)

        def seen_all(events: list[Event]) -> bool:
            wanted.difference_update(e.id for e in events)
            return not wanted

        return self.wait(seen_all, timeout_s)

    def quiet(self, quiet_s: float, max_s: float = 60.0) -> None:
        """Return once nothing arrived for ``quiet_s`` (or after ``max_s``)."""
        deadline = time.monotonic() + max_s
        with self._cond:
            seen = len(self._events)
            quiet_until = time.monotonic() + quiet_s
            while True:
                now = time.monotonic()
                if now >= min(quiet_until, deadline):
                    return
                self._cond.wait(min(quiet_until, deadline) - now)
                if len(self._events) > seen:
                    seen = len(self._events)
                    quiet_until = time.monotonic() + quiet_s


@contextlib.contextmanager
def instance_names(amqp_url: str, labels: Sequence[str]) -> Iterator[dict[str, AmqpNames]]:
    """Per-test exchange and queue names for each label; deleted afterwards."""
    names = {label: AmqpNames(exchange=unique_name(), queue=unique_name()) for label in labels}
    try:
        yield names
    finally:
        for each in names.values():
            with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                delete_topology(amqp_url, each)


# -- what went wrong ------------------------------------------------------------------------


@dataclass
class Tally:
    """The events of a set of tasks, checked: lost, duplicated, early, unknown."""

    due: Mapping[str, int]
    events: list[Event]
    counts: Counter[str] = field(init=False)

    def __post_init__(self) -> None:
        self.counts = Counter(e.id for e in self.events)

    @property
    def missing(self) -> list[str]:
        return sorted(set(self.due) - set(self.counts))

    @property
    def duplicated(self) -> dict[str, int]:
        """id -> extra deliveries."""
        return {i: n - 1 for i, n in self.counts.items() if n > 1}

    @property
    def extra(self) -> int:
        return sum(self.duplicated.values())

    @property
    def unknown(self) -> list[str]:
        return sorted(set(self.counts) - set(self.due))

    @property
    def early(self) -> list[str]:
        """Received, or fired by the event's own x-fired-ms, before the due time."""
        return [
            e.id
            for e in self.events
            if e.id in self.due and (e.received_ms < self.due[e.id] or e.fired_ms < self.due[e.id])
        ]

    def lateness_ms(self) -> list[int]:
        """receipt - due of each task's first event."""
        first: dict[str, int] = {}
        for e in self.events:
            if e.id in self.due:
                first[e.id] = min(first.get(e.id, e.received_ms), e.received_ms)
        return sorted(at - self.due[i] for i, at in first.items())

    def by(self) -> dict[str, int]:
        return dict(Counter(e.by for e in self.events))

    def summary(self) -> str:
        late = self.lateness_ms()
        worst = late[-1] if late else 0
        median = late[len(late) // 2] if late else 0
        return (
            f"{len(self.events)} events for {len(self.due)} tasks (by publisher {self.by()}), "
            f"{len(self.missing)} lost, {self.extra} duplicates ({len(self.duplicated)} ids), "
            f"{len(self.early)} early; lateness of first receipts: median {median} ms, "
            f"worst {worst} ms"
        )

    def problems(self) -> list[str]:
        found = []
        if self.missing:
            found.append(f"LOST {len(self.missing)} tasks, e.g. {self.missing[:8]}")
        if self.early:
            found.append(f"{len(self.early)} events before their due time, e.g. {self.early[:8]}")
        if self.unknown:
            found.append(f"{len(self.unknown)} events of unknown ids, e.g. {self.unknown[:8]}")
        return found


def unfenced(events: Iterable[Event], watch: ShardWatch) -> list[str]:
    """Events whose publisher held no lease on the task's shard at the
    event's ``x-fired-ms`` (R4), described."""
    out = []
    for e in events:
        shard = task_shard(e.id)
        if not watch.held(e.by, shard, e.fired_ms):
            tenures = [
                (t.owner, t.epoch, t.after_ms, t.lease_until_ms) for t in watch.tenures(shard)
            ]
            out.append(
                f"{e.id} (shard {shard}) published by {e.by} at x-fired-ms {e.fired_ms}; "
                f"tenures (owner, epoch, began after, lease until): {tenures[-4:]}"
            )
    return out
