"""The clients of the simulated daemon: they create tasks and series (some
with catch-up ``all`` or ``skip``), replace or keep them (``on_conflict``),
cancel, reschedule, bulk-cancel, and pause and resume series, through a live
instance's write path (``Engine.writes``, as the library, HTTP and AMQP
commands do), and so through that instance's fault layer. A call that fails
is simply left (a client may try again later, and a retry of a create is
answered EXISTS); what took effect is what the oracle judges.

Ids are grouped by prefix (``g0.`` … ``g3.``) for bulk cancels; once an id's
row is gone, a client may create it again (a new incarnation, as an HTTP
client may: a fired id can be created again at once, unless it had a dedup
window: some tasks have one, and their ids are the ones created again most).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from triggerhook.domain.listing import TaskFilter
from triggerhook.domain.spec import TaskRules, TaskSpec, resolve
from triggerhook.domain.task import OnConflict, Task
from triggerhook.engine.bulk import cancel_where
from triggerhook.errors import TransientError

if TYPE_CHECKING:
    from sim.instance import SimInstance
    from sim.world import World

_GROUPS = 4
LIMITED_KEY = "sim.limited"  # a routing key with a rate limit (SimConfig.settings)
_RULES = TaskRules(default_routing_key="sim", max_payload_bytes=1024)
# Every schedule is at least a second apart (a series' occurrences) and the
# cron ones meet the daylight-saving nights the world may start on.
_EVERY = ("PT1S", "PT2S", "PT3.5S")
_CRON = (
    "* * * * *",
    "*/5 * * * *",
    "30 2 * * *",
    "30 1 * * *",
    "30 0-3 * * *",
    "15,45 1-2 * * *",
    "0 2 * * *",
)
_ZONES = ("UTC", "Europe/Berlin", "America/New_York")
_WINDOWS_MS = (300, 1500, 5000)  # dedup windows: shorter and longer than a retry


class Clients:
    def __init__(self, world: World) -> None:
        self._world = world
        self._rng = world.rng
        self.created = 0
        self._ids: list[str] = []  # every id a create was tried for
        # SimConfig.backlog: planned at the first act, then tried until a create took.
        self._backlog: list[Task] | None = None
        self._backlog_created = False

    def act(self) -> None:
        live = [i for i in self._world.live() if i.registered]
        now_ms = self._world.true_ms()  # a client's host clock: not the database's
        live = [i for i in live if i.runnable(now_ms)]
        if not live:
            return
        via = self._rng.choice(live)
        draw = self._rng.random()
        try:
            if self._backlog_to_create(via, now_ms):
                return
            if draw < 0.37 or not self._ids:
                self._create(via, now_ms)
            elif draw < 0.53:
                self._series(via, now_ms, draw)
            elif draw < 0.67:
                self._cancel(via)
            elif draw < 0.82:
                self._reschedule(via, now_ms)
            elif draw < 0.85:
                self._bulk_cancel(via)
            elif draw < 0.88:
                self._recreate(via, now_ms)
            else:
                self._upsert(via, now_ms)
        except TransientError as exc:
            self._world.log(f"client via {via.name}: {exc}")

    def _new_id(self, kind: str) -> str:
        task_id = f"g{self._rng.randrange(_GROUPS)}.{kind}{len(self._ids)}"
        self._ids.append(task_id)
        return task_id

    def _insert(
        self,
        via: SimInstance,
        task: Task,
        start_ms: int | None = None,
        rule: OnConflict = OnConflict.ERROR,
    ) -> None:
        self._world.oracle.asked(task, start_ms)
        outcome = via.engine.writes.inserts.direct([(task, rule)])[0].outcome
        self.created += 1
        self._world.log(
            f"client via {via.name}: create {task.id} due {task.due_ms} ({rule.value}):"
            f" {outcome.value}"
        )

    def _create(self, via: SimInstance, now_ms: float) -> None:
        delay_ms = self._rng.randint(-1000, self._world.config.max_delay_ms)
        spec = TaskSpec(id=self._new_id("t"), at_ms=int(now_ms) + delay_ms, payload=b"x")
        if self._rng.random() < 0.3:
            spec = dataclasses.replace(spec, dedup_window_ms=self._rng.choice(_WINDOWS_MS))
        self._insert(via, resolve(spec, now_ms, _RULES))

    def _backlog_to_create(self, via: SimInstance, now_ms: float) -> bool:
        """SimConfig.backlog: tasks on the limited key, all due at one instant
        a second after the first act, created in one call (tried again at
        each act, a retry answered EXISTS, until a call took); False once it
        took, or with none asked for."""
        count = self._world.config.backlog
        if not count or self._backlog_created:
            return False
        if self._backlog is None:
            due_ms = int(now_ms) + 1000
            specs = [
                TaskSpec(id=self._new_id("b"), at_ms=due_ms, payload=b"b", routing_key=LIMITED_KEY)
                for _ in range(count)
            ]
            self._backlog = [resolve(spec, now_ms, _RULES) for spec in specs]
        for task in self._backlog:
            self._world.oracle.asked(task, None)
        inserted = via.engine.writes.inserts.direct([(t, OnConflict.ERROR) for t in self._backlog])
        self._backlog_created = True
        self.created += count
        outcomes = sorted({i.outcome.value for i in inserted})
        self._world.log(f"client via {via.name}: create a backlog of {count}: {outcomes}")
        return True

    def _create_series(self, via: SimInstance, now_ms: float) -> None:
        rng = self._rng
        start_ms = int(now_ms) + rng.randint(0, 3000)
        until_ms = start_ms + rng.randint(2000, 20_000) if rng.random() < 0.5 else None
        if rng.random() < 0.7:
            spec = TaskSpec(
                id=self._new_id("s"), every=rng.choice(_EVERY), at_ms=start_ms, until_ms=until_ms
            )
        else:
            spec = TaskSpec(
                id=self._new_id("c"),
                cron=rng.choice(_CRON),
                timezone=rng.choice(_ZONES),
                at_ms=start_ms,
            )
        # Catch-up policies: "all" with a few copies at most (a pause or an
        # outage misses several occurrences), "skip", else the default "one".
        draw = rng.random()
        if draw < 0.25:
            spec = dataclasses.replace(spec, catch_up="all", catch_up_max=rng.choice((1, 3, None)))
        elif draw < 0.4:
            spec = dataclasses.replace(spec, catch_up="skip")
        self._insert(via, resolve(spec, now_ms, _RULES), start_ms)

    def _recreate(self, via: SimInstance, now_ms: float) -> None:
        gone = [t for t in self._ids if t not in self._world.table and t.split(".")[1][0] == "t"]
        if not gone:
            return
        task_id = self._rng.choice(gone)
        delay_ms = self._rng.randint(0, self._world.config.max_delay_ms)
        spec = TaskSpec(id=task_id, at_ms=int(now_ms) + delay_ms, payload=b"again")
        if self._rng.random() < 0.5:
            spec = dataclasses.replace(spec, dedup_window_ms=self._rng.choice(_WINDOWS_MS))
        self._insert(via, resolve(spec, now_ms, _RULES))

    def _upsert(self, via: SimInstance, now_ms: float) -> None:
        """A create of an id tried before, with other content: replace (R6r;
        a debounce when the id is pending) or keep. Its payload names it, so
        the oracle can tell which content an event carries."""
        rng = self._rng
        task_id = rng.choice(self._ids)
        rule = OnConflict.REPLACE if rng.random() < 0.8 else OnConflict.KEEP
        at_ms = int(now_ms) + rng.randint(-500, self._world.config.max_delay_ms)
        payload = f"{rule.value}{self.created}".encode()
        key = LIMITED_KEY  # rate-limited: some wait for their token
        if rng.random() < 0.25:  # a series in its place: it starts over
            every = rng.choice(_EVERY)
            spec = TaskSpec(id=task_id, every=every, at_ms=at_ms, payload=payload, routing_key=key)
        else:
            spec = TaskSpec(id=task_id, at_ms=at_ms, payload=payload, routing_key=key)
        self._insert(via, resolve(spec, now_ms, _RULES), rule=rule)

    def _cancel(self, via: SimInstance) -> None:
        task_id = self._rng.choice(self._ids)
        result = via.engine.writes.cancels.direct([task_id])[0]
        self._world.log(f"client via {via.name}: cancel {task_id}: {result.value}")

    def _reschedule(self, via: SimInstance, now_ms: float) -> None:
        task_id = self._rng.choice(self._ids)
        due_ms = int(now_ms) + self._rng.randint(-500, self._world.config.max_delay_ms)
        moved = via.engine.writes.moves.direct([(task_id, due_ms)])[0]
        self._world.log(
            f"client via {via.name}: reschedule {task_id} to {due_ms}: {moved.result.value}"
        )

    def _series(self, via: SimInstance, now_ms: float, draw: float) -> None:
        """``draw`` in [0.37, 0.53): create a series (0.10), pause (0.03) or resume (0.03)."""
        if draw < 0.47:
            self._create_series(via, now_ms)
        elif draw < 0.50:
            self._pause(via)
        else:
            self._resume(via)

    def _series_id(self, paused: bool) -> str:
        """A series to pause or resume: mostly one stored (for a resume, one
        paused if any is), else any id tried (a one-off, one gone:
        NOT_A_SERIES, NOT_FOUND)."""
        table = self._world.table
        stored = [t for t, row in table.items() if row.occurrence is not None]
        if paused:
            stored = [t for t in stored if table[t].paused] or stored
        if stored and self._rng.random() < 0.8:
            return self._rng.choice(sorted(stored))
        return self._rng.choice(self._ids)

    def _pause(self, via: SimInstance) -> None:
        task_id = self._series_id(paused=False)
        result = via.engine.writes.pause([task_id])[0]
        self._world.log(f"client via {via.name}: pause {task_id}: {result.value}")

    def _resume(self, via: SimInstance) -> None:
        task_id = self._series_id(paused=True)
        result = via.engine.writes.resume([task_id])[0]
        self._world.log(f"client via {via.name}: resume {task_id}: {result.value}")

    def _bulk_cancel(self, via: SimInstance) -> None:
        """By prefix. Its calls go without faults: its own retries wait in real
        time (engine/bulk.py); each batch is an R7 cancel, faulted in ``_cancel``."""
        prefix = f"g{self._rng.randrange(_GROUPS)}."
        if self._world.read_only():  # its retries would wait out the outage in real time
            self._world.log(f"client via {via.name}: bulk cancel {prefix}: read-only, not tried")
            return
        done = cancel_where(self._world.quiet_store(via), TaskFilter(prefix=prefix), batch=3)
        self._world.log(
            f"client via {via.name}: bulk cancel {prefix}: {done.cancelled} cancelled,"
            f" {done.too_late} too late"
        )
