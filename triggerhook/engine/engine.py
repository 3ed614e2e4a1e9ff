"""The engine: builds the threads, starts them, stops them gracefully.

An engine *fires* (the default) or only writes: in an API process of
``triggerhook run`` (:mod:`triggerhook.processes`) it runs the group committers
alone, holds no shard and no instance name, and every soon-due row it writes
goes to ``wake_armer``, which tells the firing process.

Threads and what each owns: ``th-shards`` (:class:`ShardKeeper`) writes the
:class:`ShardTable`; ``th-armer`` arms tasks into the :class:`Inventory` and
the scheduler's heap; ``th-scheduler`` moves due tasks into the send buffer
(or, with a publisher that drives it — the AMQP one — the publisher's I/O
loop does, timed by the scheduler's heap, and ``th-scheduler`` only waits to
be stopped); the publisher's thread publishes them; ``th-confirmer`` deletes confirmed rows
and defers undelivered ones; the group committers write what callers ask.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from triggerhook.domain.ratelimits import RateLimit, Throttle, topic_matches
from triggerhook.domain.task import Task
from triggerhook.engine.armer import Armer
from triggerhook.engine.confirmer import Confirmer
from triggerhook.engine.inventory import Inventory
from triggerhook.engine.naming import Claimant, NameClaim, released
from triggerhook.engine.outbox import OutboxMover
from triggerhook.engine.scheduler import Scheduler
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.engine.shards import KeeperConfig, ShardKeeper, ShardTable
from triggerhook.engine.sweep import FiredSweep
from triggerhook.engine.writes import WriteLimits, Writes
from triggerhook.errors import TriggerHookError
from triggerhook.interfaces import (
    Clock,
    ConfirmSink,
    EngineStats,
    EventPublisher,
    RetryHandler,
    TaskStore,
    TimerDriver,
    new_rev,
)
from triggerhook.runtime.counters import add_totals
from triggerhook.runtime.worker import FailureHandler, Worker

log = logging.getLogger(__name__)


PublisherFactory = Callable[[SendBuffer, ConfirmSink, RetryHandler, FailureHandler], EventPublisher]


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What the engine is configured with (see :class:`~triggerhook.settings.Settings`
    for each value's meaning); the composition root builds it from the settings."""

    instance: str
    max_tasks_in_memory: int
    send_buffer_size: int
    arm_ahead_ms: int
    arm_interval_ms: int
    arm_batch_size: int
    shard_lease_ms: int
    # A lease counts as lapsed this long before its end by this instance's
    # clock (at least the clock's uncertainty bound).
    lease_margin_ms: int
    confirm_batch_size: int
    confirm_max_delay_ms: int
    schedule_batch_size: int
    commit_queue_max: int
    shutdown_timeout_s: float
    switch_interval_us: int = 0  # 0: leave the interpreter's switch interval alone
    confirm_transactions: int = 1  # delete transactions in flight at once (a burst's)
    fires: bool = True  # False: the write path only (an API process)
    rate_limits: tuple[RateLimit, ...] = ()  # per routing-key pattern (domain/ratelimits.py)
    catch_up: RateLimit | None = None  # per key, for tasks catch_up_after_ms late
    catch_up_after_ms: int = 1000
    dedup_sweep_ms: int = 60_000  # how often expired fired records are swept
    outbox_poll_ms: int = 50  # how often the outbox is read when it was empty; 0: never


class Engine:
    """Owns every engine thread. Not thread-safe itself: start/stop from one thread."""

    def __init__(
        self,
        config: EngineConfig,
        store: TaskStore,
        clock: Clock,
        publisher_factory: PublisherFactory,
        wake_armer: Callable[[], None] | None = None,
    ) -> None:
        """``wake_armer``: where soon-due writes go when the engine does not fire."""
        self.config = config
        self.instance = instance = config.instance
        self._store = store
        self._clock = clock
        self._failure: tuple[str, BaseException] | None = None
        self.failed = threading.Event()
        self.inventory = Inventory(config.max_tasks_in_memory)
        self.shards = ShardTable(clock, config.lease_margin_ms)
        self.buffer = SendBuffer(config.send_buffer_size)
        throttle = Throttle(
            config.rate_limits, self._share, config.catch_up, config.catch_up_after_ms
        )
        self.scheduler = Scheduler(
            clock,
            self.buffer,
            self.shards,
            self.inventory,
            config.send_buffer_size,
            self._fail,
            throttle,
        )
        self.armer = Armer(
            clock,
            store,
            instance,
            self.shards,
            self.inventory,
            self.scheduler,
            arm_ahead_ms=config.arm_ahead_ms,
            interval_ms=config.arm_interval_ms,
            batch_size=config.arm_batch_size,
            on_failure=self._fail,
        )
        self.token = new_rev()  # this process's hold on the instance name (R1)
        self.keeper = ShardKeeper(
            KeeperConfig(instance, self.token, config.shard_lease_ms),
            store,
            clock,
            self.shards,
            self.inventory.in_shard,
            self.armer.wake,
            self._fail,
        )
        self.confirmer = Confirmer(
            store,
            self.inventory,
            self.scheduler,
            instance,
            config.confirm_batch_size,
            config.confirm_max_delay_ms,
            self._fail,
            clock=clock,
            lanes=config.confirm_transactions,
            sweep=FiredSweep(store, self._owned_shards, clock, config.dedup_sweep_ms),
        )
        # R8p: a copy held by a rate limit past the arming horizon waits in
        # the database, not in memory, where it would keep other keys' later
        # tasks from being armed (docs/design/flow-control.md, section 3a).
        # Written back only once less than half the memory bound is free: a
        # queue that fits in the other half costs the database no write.
        self.scheduler.postpone_to(
            self.confirmer.postpone, config.arm_ahead_ms, config.max_tasks_in_memory // 2
        )
        self.publisher = publisher_factory(self.buffer, self.confirmer, self._retry, self._fail)
        if isinstance(self.publisher, TimerDriver):  # its loop times the scheduler
            self.publisher.drive(self.scheduler)
        self.buffer.on_put = self.publisher.wake
        self.buffer.on_room = self.scheduler.wake
        self.buffer.gate = lambda tasks: self.scheduler.screen(tasks, clock.now_ms())
        limits = WriteLimits(
            config.arm_ahead_ms + config.arm_interval_ms,
            config.schedule_batch_size,
            config.commit_queue_max,
        )
        owns: Callable[[int], bool]
        if config.fires:
            owns, wake = self.shards.owns, self.armer.wake
        else:
            owns, wake = _every_shard, wake_armer or _nobody
        self.writes = Writes(store, clock, owns, wake, limits, lambda: self.running, self._fail)
        # R6o: tasks callers scheduled inside their own transactions.
        self.outbox: OutboxMover | None = None
        if config.outbox_poll_ms > 0:
            self.outbox = OutboxMover(self.writes.move_outbox, config.outbox_poll_ms, self._fail)
        self._running = False
        self.publish_retries = 0  # the publisher's thread only
        self._more_counters: list[Callable[[], dict[str, int]]] = []

    # -- lifecycle -------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running and not self.failed.is_set()

    def open_lanes(self) -> None:
        """With rate limits, limited keys' tasks are written to shards of their
        own, armed after every other key's (lanes: docs/design/flow-control.md,
        3b); their shard rows are added where missing. Before any write."""
        if self.config.rate_limits:
            self._store.open_lanes(limited_keys(self.config.rate_limits))

    def start(self) -> None:
        self.open_lanes()
        if not self.config.fires:
            self.writes.start()
            self._running = True
            log.info("write path started", extra={"instance": self.instance})
            return
        if self.config.switch_interval_us:
            # A busy thread gives up the GIL only every switch interval; the
            # scheduler waking at a due time must not wait 5 ms (the default).
            sys.setswitchinterval(self.config.switch_interval_us / 1e6)
            # A full garbage collection stops every thread for as long as it
            # takes to walk the live objects; leave out those that exist at
            # start (modules, configuration, the caller's data) for good.
            gc.freeze()
        # R1: takes the name over from a dead holder; refuses (InstanceNameInUse)
        # while a live process holds it. Blocks for at most a lease.
        me = Claimant(
            self.instance, self.token, socket.gethostname(), os.getpid(), self.config.shard_lease_ms
        )
        NameClaim(self._store, me).run()
        for worker in self._workers():
            worker.start()
        self.writes.start()
        self._running = True
        log.info("engine started", extra={"instance": self.instance})

    def _workers(self) -> list[Worker | EventPublisher]:
        if not self.config.fires:
            return []
        # Downstream first, so nothing is handed to a stage that is not running.
        outbox = [] if self.outbox is None else [self.outbox]
        return [self.confirmer, self.publisher, self.scheduler, self.armer, self.keeper, *outbox]

    def _db_threads(self) -> list[Worker]:
        """The firing engine's threads that write to the database."""
        if not self.config.fires:
            return []
        outbox = [] if self.outbox is None else [self.outbox]
        return [self.keeper, self.armer, self.confirmer, *outbox]

    def _share(self) -> float:
        """This instance's share of each rate limit: the fraction of the shards
        it holds, of both lanes (the scheduler's thread asks, for a limited
        task). Shards are acquired at random, so each lane's come alike; a
        skew between the lanes' fractions can only run a limit below its
        rate, never above (the shares still sum to one). The shard count is
        known by then (the keeper read it to hold any); unknown, the share is
        0: the limited task waits and asks again."""
        try:
            total = self._store.placement().total  # kept by the store, read again by the keeper
        except TriggerHookError as exc:
            log.warning("the shard count is unknown (%s): rate-limited tasks wait", exc)
            return 0.0
        return len(self.shards) / max(1, total)

    def write_refusal(self) -> str | None:
        """How the database refuses this engine's writes now (``read-only``,
        ``out of space``: the kind, never the server's text), as the last
        failure of a thread or group commit said; None while it takes them."""
        refusals = [worker.refusal for worker in self._db_threads()] + [self.writes.refusal()]
        return next((r.kind for r in refusals if r is not None), None)

    def alive(self) -> bool:
        """Every thread of a running engine is alive (a wedged one is not seen here)."""
        return self.running and all(w.is_alive() for w in self._workers())

    def stalled(self, max_silence_s: float) -> list[str]:
        """The threads that made no progress within ``max_silence_s``
        (:meth:`~triggerhook.runtime.worker.Worker.stalled`: no beat, and not
        inside a database call within its bound), by name."""
        now_s = time.monotonic()
        named: list[tuple[str, Worker | EventPublisher]] = [
            ("th-publisher", self.publisher),
            *((w.name, w) for w in (self.confirmer, self.scheduler, self.armer, self.keeper)),
            *(("th-outbox", w) for w in (self.outbox,) if w is not None),
        ]
        fires = self.config.fires
        return [name for name, w in named if fires and w.stalled(now_s, max_silence_s)]

    def responsive(self, max_silence_s: float) -> bool:
        """Alive, and every thread (scheduler, armer, publisher, confirmer,
        shard keeper) made progress within ``max_silence_s``: none is wedged.
        An idle thread beats every second; one retrying through an outage
        beats at each try (:class:`~triggerhook.runtime.worker.Worker`)."""
        if not self.alive():
            return False
        stalled = self.stalled(max_silence_s)
        if stalled:
            log.error("no progress for over %.0f s: %s", max_silence_s, ", ".join(stalled))
        return not stalled

    def stop(self, timeout_s: float | None = None) -> bool:
        """Graceful stop; True when everything armed was published and confirmed.

        Order: stop writing and arming, fire what is armed and due soon, wait
        for the broker's confirms, delete the confirmed rows, then release the
        shards and the instance name. Leases are renewed until then; what is
        left armed (due later, or unconfirmed) the shards' next owners inherit.
        """
        if not self._running:
            return True
        self._running = False
        timeout = self.config.shutdown_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        self.writes.stop()
        if not self.config.fires:
            return self.writes.join(_left(deadline)) and not self.failed.is_set()
        if self.outbox is not None:  # a move is one transaction: whole or not at all
            self.outbox.stop()
            self.outbox.join(_left(deadline))
        self.armer.stop()
        self.writes.join(_left(deadline))
        self.armer.join(_left(deadline))
        self.scheduler.drain_until(self._clock.now_ms() + self.config.arm_ahead_ms)
        self.scheduler.join(_left(deadline))
        self.publisher.finish(deadline)
        clean = self.publisher.join(_left(deadline) + 1.0)
        self.confirmer.stop(deadline)
        self.confirmer.join(_left(deadline) + 1.0)
        self.keeper.stop()
        self.keeper.join(_left(deadline) + 1.0)
        left = len(self.buffer) + self.confirmer.pending() + len(self.scheduler)
        self.keeper.finish()
        released(self.instance, self.token)
        log.info("engine stopped", extra={"instance": self.instance, "unpublished": left})
        return clean and left == 0 and not self.failed.is_set()

    # -- failures and retries --------------------------------------------------

    def _fail(self, name: str, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = (name, exc)
        self.failed.set()

    @property
    def failure(self) -> str | None:
        if self._failure is None:
            return None
        name, exc = self._failure
        return f"thread {name} failed: {exc!r}"

    def _retry(self, task: Task, delay_ms: int) -> None:
        """An unroutable or nacked event: its row goes back to the store, unarmed
        and out of memory, to be armed and fired again after ``delay_ms``
        (the publisher decided; it also logs, rate-limited)."""
        self.publish_retries += 1
        self.confirmer.defer(task, int(self._clock.now_ms()) + delay_ms)

    def _owned_shards(self) -> list[int]:
        """The shards this instance holds now (the sweep's: any thread)."""
        return [lease.shard for lease in self.shards.leases()]

    def count_also(self, counters: Callable[[], dict[str, int]]) -> None:
        """Add ``counters`` (totals since start, e.g. the API processes' writes)
        to :meth:`counters`; call before :meth:`start`."""
        self._more_counters.append(counters)

    def counters(self) -> dict[str, int]:
        """Totals since start, for metrics (the metrics thread takes differences)."""
        totals = self._own_counters()
        for more in self._more_counters:
            add_totals(totals, more())
        return totals

    def _own_counters(self) -> dict[str, int]:
        db_errors = sum(w.transient_errors for w in self._db_threads())
        db_errors += self.writes.failed_writes()
        return {
            **self.writes.counters(),
            "armed": self.armer.armed,
            "inherited": self.armer.inherited,
            "shards_lost": self.shards.lost,
            "fired": self.scheduler.fired,
            "throttled": self.scheduler.throttled(),
            **self.scheduler.throttle_totals(),
            "postponed": self.confirmer.postponed,
            "deleted": self.confirmer.deleted,
            "dedup_recorded": self.confirmer.recorded,
            "dedup_swept": self.confirmer.swept(),
            "publish_retries": self.publish_retries,
            "db_errors": db_errors,
            **self.publisher.counters(),
        }

    def take_lateness(self) -> list[float]:
        """Publish time - due time (ms) of each event published since the last call."""
        return self.publisher.take_lateness()

    def stats(self) -> EngineStats:
        return EngineStats(
            in_memory=len(self.inventory),
            shards=len(self.shards),
            armed=len(self.scheduler),
            send_buffer=len(self.buffer),
            unconfirmed=self.publisher.unconfirmed(),
            members=self.keeper.members,
            fired=self.scheduler.fired,
            deleted=self.confirmer.deleted,
            throttle_holding=self.scheduler.throttle_holding(),
        )


def _every_shard(_shard: int) -> bool:
    return True


def _nobody() -> None:
    pass


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def limited_keys(limits: Sequence[RateLimit]) -> Callable[[str], bool]:
    """Whether a routing key is one a rate limit names (its tasks go to the
    rate-limited lane). Memoized: a writer asks at every insert."""
    patterns = tuple(limit.pattern for limit in limits)

    @functools.lru_cache(maxsize=4096)
    def limited(key: str) -> bool:
        return any(topic_matches(pattern, key) for pattern in patterns)

    return limited
