"""One simulated instance of the daemon: the real engine, its real database
clock, the fault layer in front of the store and the simulated publisher —
and no threads. The world calls each thread's loop body (``step``) when it
chooses; a real thread can always be that slow or that quick, so every
order the world picks is one a daemon can meet.

What each step stands for (the thread, and the call its loop makes):

=============  ============================================================
``keeper``     ``th-shards``: ``ShardKeeper.step`` (heartbeat, renew, acquire, hand over)
``armer``      ``th-armer``: ``Armer.step``
``scheduler``  ``th-scheduler``: ``Scheduler.poll`` then ``handle``
``publisher``  the publisher's thread: take from the send buffer, publish
``confirmer``  ``th-confirmer``: ``Confirmer.step``
``clock``      ``th-clock``: ``DatabaseClock.sync``
=============  ============================================================

A :class:`~triggerhook.errors.TransientError` from a step is what the
thread's back-off handles: it is counted and the world steps the thread
again later. :class:`~triggerhook.engine.shards.InstanceNameLost` is the
documented end (the daemon exits). Any other exception is a thread dying:
a finding.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from sim.broker import Deliveries, SimPublisher
from sim.faults import FaultRates, FaultyStore, Observer
from sim.oracle import Violation
from triggerhook.clock import DatabaseClock
from triggerhook.engine.engine import Engine
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.engine.shards import InstanceNameLost
from triggerhook.errors import InstanceNameInUse, TransientError
from triggerhook.interfaces import ConfirmSink, RetryHandler, TaskStore
from triggerhook.runtime.worker import FailureHandler
from triggerhook.settings import Settings
from triggerhook.wiring import delivery_policy, engine_config

STEPS = ("keeper", "armer", "scheduler", "publisher", "confirmer", "clock")


class ThreadDied(AssertionError):
    """An engine thread would have died of an exception it does not handle."""


class SimInstance:
    def __init__(
        self,
        name: str,
        store: TaskStore,
        world: Observer,
        deliveries: Deliveries,
        settings: Settings,
        rng: random.Random,
        rates: FaultRates,
    ) -> None:
        self.name = name
        self._world = world
        self.store = FaultyStore(store, name, world, rng, rates)
        # Each host's monotonic clock runs at its own rate (within the drift
        # the settings allow) from its own origin.
        self._rate = 1 + rng.uniform(-0.5, 0.5) * settings.clock_drift_ppm / 1e6
        self._origin_ns = rng.randrange(10**15)
        self.clock = DatabaseClock(
            self.store.database_time_us,
            settings.clock_uncertainty_max_ms,
            settings.clock_drift_ppm,
            self.monotonic_ns,
        )
        config = dataclasses.replace(engine_config(settings), instance=name)
        policy = delivery_policy(settings)

        def publisher(
            buffer: SendBuffer, confirms: ConfirmSink, retry: RetryHandler, _fail: FailureHandler
        ) -> SimPublisher:
            return SimPublisher(
                name, buffer, confirms, retry, self.clock, world.now_ms, deliveries, policy
            )

        self.engine = Engine(config, self.store, self.clock, publisher)
        assert isinstance(self.engine.publisher, SimPublisher)
        self.publisher: SimPublisher = self.engine.publisher
        self.registered = False
        self.synced = False
        self.dead = False
        self.paused_until_ms = -1.0
        self.transient = 0
        # When each thread's loop comes round again, as its real wait says
        # (the world may be later: a thread can always be slow).
        self.next_ms = dict.fromkeys(STEPS, -1.0)
        self._lease_ms = settings.shard_lease_ms
        self._arm_interval_ms = settings.arm_interval_ms
        self._sync_interval_ms = settings.clock_sync_interval_ms
        self._rng = rng

    def monotonic_ns(self) -> int:
        return self._origin_ns + int(self._world.true_ms() * self._rate * 1e6)

    def runnable(self, now_ms: float) -> bool:
        return not self.dead and now_ms >= self.paused_until_ms

    def start(self, lease_ms: int) -> bool:
        """The daemon's start: the clock's first sample, then the name (R1).
        False: not yet (a fault, or the name is held: a restart retries)."""
        try:
            if not self.synced:
                self.clock.sync()
                self.synced = True
            self.engine.open_lanes()  # with a limit: the limited key's own shards
            self.store.register(self.name, self.engine.token, "sim", 0, lease_ms)
        except (TransientError, InstanceNameInUse) as exc:
            self._world.log(f"{self.name}: start: {exc}")
            return False
        self.registered = True
        self._world.log(f"{self.name}: started")
        return True

    def due(self, what: str, now_ms: float) -> bool:
        return now_ms >= self.next_ms[what]

    def step(self, what: str) -> None:
        """One turn of a thread's loop, and when the loop comes round again."""
        action: Callable[[], float] = getattr(self, f"_{what}")
        now_ms = self._world.true_ms()
        try:
            self.next_ms[what] = now_ms + action()
        except TransientError as exc:
            self.transient += 1
            self.next_ms[what] = now_ms + self._rng.uniform(50, 1000)  # the back-off
            self._world.log(f"{self.name}: {what}: {exc}")
        except InstanceNameLost as exc:
            self._world.log(f"{self.name}: {exc}: exits")
            self.dead = True
        except Violation:  # the oracle's, from inside a store call: not the thread's
            raise
        except Exception as exc:
            raise ThreadDied(f"{self.name}: thread {what} failed: {exc!r}") from exc

    # Each returns how long its thread then waits (ms) before its loop comes round.

    def _keeper(self) -> float:
        busy = self.engine.keeper.step(self.clock.now_ms())
        return min(250.0, self._lease_ms / 3) if busy else self._lease_ms / 3

    def _armer(self) -> float:
        while self.engine.armer.step(self.clock.now_ms()):  # a full pass: the next at once
            pass
        return self._arm_interval_ms

    def _scheduler(self) -> float:
        scheduler = self.engine.scheduler
        now_ms = self.clock.now_ms()
        batch, _wait = scheduler.poll(now_ms)
        if batch:
            scheduler.handle(batch, now_ms)
        return 0.0

    def _publisher(self) -> float:
        self.publisher.step()
        return 0.0

    def _confirmer(self) -> float:
        self.engine.confirmer.step()
        return 0.0

    def _clock(self) -> float:
        self.clock.sync()
        return self._sync_interval_ms
