"""The simulated world: one thread, one seeded random source, simulated time.

A run (:func:`run`) builds 2-3 instances of the real engine (``sim.instance``)
over one real store (``sim.backends``), then goes round a loop; each turn it
picks, from the seed, what happens next:

* time moves on (mostly a few ms, sometimes much more);
* some threads of some instances go round their loop (``SimInstance.step``);
* the broker answers publishes (acks in order or not, nacks, returns, a
  dropped connection with publishes outstanding);
* a client creates a task or a series, cancels, reschedules, bulk-cancels,
  pauses or resumes a series (``sim.clients``);
* a fault begins: an instance pauses (past its lease, often), crashes (kill
  -9) and is started again, the database turns read-only for a while; and,
  inside every store call, the fault layer's errors, lost answers and stalls
  (``sim.faults``).

After ``fault_ms`` the faults stop and clients stop writing; the world runs
on ``quiet_ms`` more with every live thread stepping each turn and the broker
acking everything, then the oracle's end checks run (``sim.oracle``). The
oracle checks each write and each event as it happens; the first violation
stops the run.

Determinism: the world's choices come from ``random.Random(seed)``; the
engine's own randomness (revisions, which shards to acquire or hand over)
from the ``random`` module, seeded from it; the instances' clocks are the
world's time. The same seed replays the same run on the memory and SQLite
stores. On MariaDB the server's own choices (lock waits, none in one thread)
and the order of rows it returns for equal keys could differ: a failing seed
there replays in practice, which is not a proof.
"""

from __future__ import annotations

import logging
import math
import random
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from sim.backends import open_backend
from sim.broker import Published
from sim.clients import LIMITED_KEY, Clients
from sim.faults import FaultRates, FaultyStore
from sim.instance import STEPS, SimInstance
from sim.oracle import Oracle, Table, Violation
from sim.oracle_rate import RateCheck
from triggerhook.domain.ratelimits import parse_rate
from triggerhook.interfaces import Acquired
from triggerhook.settings import Settings

# Where simulated time starts: an ordinary day, and the nights the clocks of
# Europe/Berlin and America/New_York go back (in their repeated hour) and
# forward (just before the skipped one): cron series in those zones meet them.
STARTS_MS = (
    1_800_000_000_000,  # 2027-01-15 08:00Z
    1_824_944_700_000,  # 2027-10-31 01:05Z: Berlin's 02:05, the second time
    1_825_567_500_000,  # 2027-11-07 06:05Z: New York's 01:05, the second time
    1_806_195_300_000,  # 2027-03-28 00:55Z: Berlin's 01:55, just before 02:00 is skipped
    1_805_007_300_000,  # 2027-03-14 06:55Z: New York's 01:55, likewise
)


@dataclass(frozen=True, slots=True)
class SimConfig:
    store: str = "memory"
    instances: int = 3
    shard_count: int = 6
    fault_ms: int = 40_000
    lease_ms: int = 3000
    rates: FaultRates = field(default_factory=FaultRates)
    pause_chance: float = 0.002  # per turn
    crash_chance: float = 0.0005
    read_only_chance: float = 0.0005
    clock_step_chance: float = 0.0005  # the database's clock is stepped (NTP)
    clock_steps_back: bool = False  # backward too (known to fire early: see docs)
    client_chance: float = 0.25
    max_delay_ms: int = 6000  # tasks are due up to this far ahead
    limit: str = "5/s burst 2"  # the rate limit of LIMITED_KEY, over all instances
    # Tasks on LIMITED_KEY a client creates at once, all due at one instant,
    # early in the run: a queue behind the limit that may outgrow the memory
    # bound (max_tasks_in_memory), so held tasks wait in the database (R8p).
    backlog: int = 0
    # The oracle's rate check (sim.oracle_rate) on the limited key (off: to
    # look at the other promises alone, scripts/sim --no-rate-check).
    rate_check: bool = True

    def settings(self) -> Settings:
        """Small numbers, so that every path is taken: little memory (passes
        cut by their room), short leases, quick retries."""
        return Settings(
            shard_lease_ms=self.lease_ms,
            arm_ahead_ms=400,
            arm_interval_ms=50,
            arm_batch_size=8,
            max_tasks_in_memory=24,
            send_buffer_size=10,
            confirm_batch_size=6,
            # One delete at a time: side by side (the default) they run on a
            # pool's threads, so a seed's trace would hang on thread timing and
            # the oracle, judging each write against the table before it, would
            # see one lane's rows vanish in another's write (seed 133 in CI).
            # The lanes' rules are tested in tests/unit/test_engine_stages.py;
            # the daemon and the benchmarks run them against MariaDB.
            confirm_transactions=1,
            publish_retry_max_ms=1500,
            publish_max_attempts=4,
            clock_uncertainty_max_ms=50,
            clock_drift_ppm=500,
            database_idle_transaction_timeout_s=1,
            # The clients' upserts go to this key: a queue forms behind its
            # tokens, so held tasks meet every fault (none early, none lost).
            rate_limits=f"{LIMITED_KEY}={self.limit}",
        )

    @property
    def bound_ms(self) -> int:
        """After the faults stop, every task fires within this of its time:
        a dead owner's lease runs out, another acquires the shard and
        inherits its rows (two leases at most), a write-back's retry waits
        out its back-off, and arming looks ahead."""
        settings = self.settings()
        bound_ms = 2 * self.lease_ms + settings.publish_retry_max_ms + settings.arm_ahead_ms + 1000
        return bound_ms + self.backlog_ms

    @property
    def backlog_ms(self) -> int:
        """How long the backlog takes to leave at the limit: its last task is
        that much later, by design (the faults add the bound's own terms)."""
        limit = parse_rate(self.limit, "limit")
        return 0 if limit is None else math.ceil(self.backlog / limit.per_s * 1000)

    @property
    def quiet_ms(self) -> int:
        return self.max_delay_ms + 2 * self.bound_ms


@dataclass(slots=True)
class Outcome:
    seed: int
    config: SimConfig
    violation: str | None
    trace: list[str]
    stats: dict[str, int]

    def report(self, last: int = 80, about: str | None = None) -> str:
        """The outcome; after a violation the trace's ``last`` lines, and
        every earlier one that mentions ``about`` (an id, a shard)."""
        head = f"seed {self.seed} ({self.config.store}):"
        if self.violation is None:
            return f"{head} ok {self.stats}"
        cut = max(0, len(self.trace) - last)
        earlier = [line for line in self.trace[:cut] if about and about in line]
        lines = [*earlier, *(["..."] if earlier else []), *self.trace[cut:]]
        tail = "\n".join(lines)
        return f"{head} VIOLATION: {self.violation}\n--- the trace ---\n{tail}"


class _TraceHandler(logging.Handler):
    """The engine's warnings, into the trace."""

    def __init__(self, world: World) -> None:
        super().__init__(logging.WARNING)
        self._world = world

    def emit(self, record: logging.LogRecord) -> None:
        self._world.log(f"log {record.name}: {record.getMessage()}")


class World:
    def __init__(self, seed: int, config: SimConfig, trace_lines: int | None = 400) -> None:
        self.seed = seed
        self.config = config
        self.rng = random.Random(seed)
        random.seed(self.rng.getrandbits(64))
        self._true_ms = float(self.rng.choice(STARTS_MS)) + self.rng.randrange(60_000)
        self._db_offset_ms = 0.0  # the database's clock minus the true time (it may be stepped)
        self.start_ms = self._true_ms
        self.faults_until_ms = self._true_ms + config.fault_ms
        self.read_only_until_ms = -1.0
        self._losing_commits = False
        self.trace: deque[str] = deque(maxlen=trace_lines)
        self.settings = config.settings()
        self.backend = open_backend(
            config.store, self.now_ms, config.shard_count, self._take_lost_commit
        )
        limits, _catch_up = self.settings.throttle_limits()  # the sim sets no catch-up rate
        checked = limits if config.rate_check else ()
        # With a limit, the store has the limited lane's shards too (N more).
        shards = config.shard_count * (2 if limits else 1)
        rate = RateCheck(checked, shards, self.start_ms) if checked else None
        self.oracle = Oracle(self.now_ms, config.bound_ms, rate)
        self.table: Table = self.backend.dump()
        self.instances: list[SimInstance] = []
        self._names = 0
        self.clients = Clients(self)
        names = ("turns", "pauses", "crashes", "read_only", "stalls", "clock_steps")
        self.stats = dict.fromkeys(names, 0)
        for _ in range(config.instances):
            self.add_instance()

    # -- what the fault layer and the instances see (sim.faults.Observer) -------------

    def now_ms(self) -> float:
        """The database's clock (its NOW): what the store reads, what the oracle judges by."""
        return self._true_ms + self._db_offset_ms

    def true_ms(self) -> float:
        """The true time: the hosts' monotonic clocks run by it."""
        return self._true_ms

    def faults_on(self) -> bool:
        return self._true_ms < self.faults_until_ms

    def read_only(self) -> bool:
        return self._true_ms < self.read_only_until_ms

    def stall(self, instance: str, what: str) -> None:
        stall_ms = self.rng.uniform(0.2, 1.2) * self.config.lease_ms
        self.stats["stalls"] += 1
        self.log(f"{instance}: {what} stalls {stall_ms:.0f} ms")
        self._true_ms += stall_ms

    def lose_commits(self, on: bool) -> bool:
        if not self.backend.commit_faults:
            return False
        self._losing_commits = on
        return True

    def _take_lost_commit(self) -> bool:
        lost, self._losing_commits = self._losing_commits, False
        return lost

    def wrote(self, instance: str, name: str, args: tuple[object, ...], result: object) -> None:
        after = self.backend.dump()
        try:
            self.oracle.wrote(name, args, result, self.table, after)
            if name == "acquire":
                self.oracle.acquired(instance, result)  # type: ignore[arg-type]
        finally:
            self.table = after
        if name not in ("heartbeat", "renew") and (name != "arm" or _armed_some(result)):
            self.log(f"{instance}: {name} -> {_short(result)}")

    def log(self, line: str) -> None:
        self.trace.append(f"{self._true_ms - self.start_ms:10.1f} {line}")

    # -- the broker's side (sim.broker.Deliveries) ----------------------------------------

    def delivered(self, event: Published) -> None:
        task = event.task
        self.log(
            f"{event.instance}: delivered {task.id} rev {task.rev} due {task.due_ms}"
            f"{' (dead letter)' if event.dead else ''}"
        )
        self.oracle.delivered(event)

    def confirmed(self, event: Published) -> None:
        self.oracle.confirmed_event(event)

    # -- instances ------------------------------------------------------------------------

    def add_instance(self, name: str | None = None) -> SimInstance:
        if name is None:
            name = f"sim-{self._names}"
            self._names += 1
        rng = random.Random(self.rng.getrandbits(64))
        instance = SimInstance(
            name, self.backend.connect(), self, self, self.settings, rng, self.config.rates
        )
        self.instances.append(instance)
        self.oracle.started(name)
        self.log(f"{name}: created")
        return instance

    def live(self) -> list[SimInstance]:
        return [i for i in self.instances if not i.dead]

    def quiet_store(self, instance: SimInstance) -> FaultyStore:
        """The store as a caller without faults sees it (still shown to the oracle)."""
        return FaultyStore(
            self.backend.store, instance.name, self, self.rng, self.config.rates, faults=False
        )

    # -- one turn ---------------------------------------------------------------------------

    def turn(self, quiet: bool) -> None:
        self.stats["turns"] += 1
        self._true_ms += self._dt_ms(quiet)
        if not quiet:
            self._maybe_fault()
        for instance in self._order():
            self._run_instance(instance, quiet)
        if not quiet and self.rng.random() < self.config.client_chance:
            self.clients.act()

    def _dt_ms(self, quiet: bool) -> float:
        draw = self.rng.random()
        if quiet or draw < 0.9:
            return self.rng.uniform(0.5, 25.0)
        return self.rng.uniform(25.0, 600.0)

    def _order(self) -> list[SimInstance]:
        order = list(self.instances)
        self.rng.shuffle(order)
        return order

    def _run_instance(self, instance: SimInstance, quiet: bool) -> None:
        if not instance.runnable(self._true_ms):
            return
        if not instance.registered:
            instance.start(self.config.lease_ms)
            return
        steps = [what for what in STEPS if instance.due(what, self._true_ms)]
        self.rng.shuffle(steps)
        for what in steps:
            if quiet or self.rng.random() < 0.8:
                instance.step(what)
                if instance.dead:
                    return
        self._broker(instance, quiet)

    def _broker(self, instance: SimInstance, quiet: bool) -> None:
        publisher, rng = instance.publisher, self.rng
        if not publisher.connected:
            if quiet or rng.random() < 0.05:
                publisher.reconnect()
            return
        if quiet:
            publisher.ack_oldest(10**9)
            return
        draw = rng.random()
        if draw < 0.5:
            publisher.ack_oldest(rng.randint(1, 4))
        elif draw < 0.6:
            publisher.ack_one(rng)
        elif draw < 0.63:
            publisher.nack_one(rng)
        elif draw < 0.66:
            publisher.return_one(rng)
        elif draw < 0.67 and publisher.has_outstanding():
            self.log(f"{instance.name}: broker connection dropped")
            publisher.drop_connection(rng)

    def _maybe_fault(self) -> None:
        rng, config, lease = self.rng, self.config, self.config.lease_ms
        live = [i for i in self.live() if i.runnable(self._true_ms)]
        if live and rng.random() < config.pause_chance:
            victim = rng.choice(live)
            victim.paused_until_ms = self._true_ms + rng.uniform(0.3, 2.5) * lease
            self.stats["pauses"] += 1
            self.log(f"{victim.name}: paused until {victim.paused_until_ms - self.start_ms:.0f}")
        if len(live) > 1 and rng.random() < config.crash_chance:
            victim = rng.choice(live)
            victim.dead = True
            self.stats["crashes"] += 1
            again = victim.name if rng.random() < 0.3 else None
            self.log(f"{victim.name}: killed (-9); started again as {again or 'a new name'}")
            self.add_instance(again)
        if rng.random() < config.clock_step_chance:
            step_ms = rng.uniform(50.0, 2000.0)
            if config.clock_steps_back and rng.random() < 0.5:
                step_ms = -step_ms
            self._db_offset_ms += step_ms
            self.stats["clock_steps"] += 1
            self.log(f"the database's clock steps {step_ms:+.0f} ms")
        if rng.random() < config.read_only_chance:
            self.read_only_until_ms = self._true_ms + rng.uniform(0.3, 2.0) * lease
            self.stats["read_only"] += 1
            self.log(f"database read-only until {self.read_only_until_ms - self.start_ms:.0f}")

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> None:
        while self._true_ms < self.faults_until_ms:
            self.turn(quiet=False)
        self.oracle.faults_end_ms = self.now_ms()
        self.log("faults end")
        for instance in self.live():
            instance.paused_until_ms = -1.0
        end_ms = self._true_ms + self.config.quiet_ms
        while self._true_ms < end_ms:
            self.turn(quiet=True)
        self.oracle.finish(self.backend.dump(), self.now_ms())

    def close(self) -> None:
        self.backend.close()


def _armed_some(result: object) -> bool:
    return bool(getattr(result, "tasks", None) or getattr(result, "lost", None))


def _short(result: object) -> str:
    if isinstance(result, list):
        items: Sequence[object] = result
        if items and isinstance(items[0], Acquired):
            return str([(a.lease.shard, a.lease.epoch) for a in items])  # type: ignore[attr-defined]
        return str([getattr(x, "value", x) for x in items][:6])
    return str(getattr(result, "value", result))[:120]


@contextmanager
def _tracing(world: World) -> Iterator[None]:
    handler = _TraceHandler(world)
    root = logging.getLogger("triggerhook")
    root.addHandler(handler)
    level, propagate = root.level, root.propagate
    root.setLevel(logging.WARNING)
    root.propagate = False  # the trace holds it; a failing run prints it
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        root.propagate = propagate


def run(seed: int, config: SimConfig | None = None, trace_lines: int | None = 400) -> Outcome:
    """One run; its outcome names the seed, and the trace on a violation
    (its last ``trace_lines``; None: all of it)."""
    config = config or SimConfig()
    world = World(seed, config, trace_lines)
    violation: str | None = None
    try:
        with _tracing(world):
            world.run()
    except (Violation, AssertionError) as exc:
        violation = f"{type(exc).__name__}: {exc}"
    finally:
        world.close()
    stats = dict(world.stats)
    stats["delivered"] = world.oracle.delivered_count
    stats["rate_checked"] = 0 if world.oracle.rate is None else world.oracle.rate.checked
    stats["postponed"] = sum(i.engine.confirmer.postponed for i in world.instances)
    stats["tasks"] = world.clients.created
    return Outcome(seed, config, violation, list(world.trace), stats)
