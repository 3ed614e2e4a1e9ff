"""What every scenario shares: isolation, the consumer process, measurement records.

Scenarios record what they measured in a :class:`Recorder` as they go, so a
scenario that fails half-way keeps the figures it had and the report says
where it stopped.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing as mp
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any
from urllib.parse import urlsplit

import pika
from sqlalchemy.engine import make_url

from triggerhook import Settings
from triggerhook.logs import redact
from triggerhook.runtime.counters import quantile
from triggerhook.store.mysql.connection import open_connection, target

log = logging.getLogger(__name__)

# The driver the engine speaks (python -m benchmarks --driver): unset, what the
# URL's scheme says. The benchmarks' own set-up speaks PyMySQL.
DRIVER_VARIABLE = "TRIGGERHOOK_BENCH_DRIVER"
# The servers: the daemon's own variables (--database-url and --amqp-url set
# them, for the worker processes too), else the daemon's defaults. Each
# scenario creates its own database on that server and drops it afterwards.
DATABASE_URL_VARIABLE = "TRIGGERHOOK_DATABASE_URL"
AMQP_URL_VARIABLE = "TRIGGERHOOK_AMQP_URL"


def database_url(database: str) -> str:
    """The benchmarks' database server, with ``database`` in the URL's path
    (its scheme per ``--driver``)."""
    url = make_url(os.environ.get(DATABASE_URL_VARIABLE) or Settings().database_url)
    driver = os.environ.get(DRIVER_VARIABLE)
    if driver:
        url = url.set(drivername=f"mysql+{driver}")
    return url.set(database=database).render_as_string(hide_password=False)


def amqp_url() -> str:
    return os.environ.get(AMQP_URL_VARIABLE) or Settings().amqp_url


def admin_connection(database: str | None = None) -> Any:
    """A PyMySQL connection (autocommit) to the benchmarks' database server,
    for their own set-up and checks; in ``database`` if given."""
    url = make_url(database_url(database or "")).set(drivername="mysql+pymysql")
    to = target(url.render_as_string(hide_password=False), with_database=database is not None)
    return open_connection(to, autocommit=True)


def admin_statement(statement: str) -> None:
    """One statement of the benchmarks' own set-up, on a connection of its own."""
    db = admin_connection()
    try:
        db.cursor().execute(statement)
    finally:
        db.close()


def servers() -> dict[str, str]:
    """Where the benchmarks run (passwords masked), for their report."""
    return {"database": redact(database_url("")), "amqp": redact(amqp_url())}


FAR_FUTURE_MS = 86_400_000  # "never due during the run": a day ahead

QUANTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p99.9", 0.999))


@dataclass(frozen=True)
class Figure:
    """One measured value; ``key`` names it in the report's catalogue."""

    key: str
    value: float
    detail: str = ""


@dataclass(frozen=True)
class Distribution:
    """Summary of per-task values (lateness in ms) and how many were early."""

    key: str
    label: str
    count: int
    stats: dict[str, float]
    early: int


@dataclass
class Recorder:
    """Everything one scenario measured; plots get the raw series."""

    scenario: str
    figures: list[Figure] = field(default_factory=list)
    distributions: list[Distribution] = field(default_factory=list)
    series: dict[str, list[float]] = field(default_factory=dict)
    timeline: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def add(self, key: str, value: float, detail: str = "") -> None:
        self.figures.append(Figure(key, value, detail))

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Run one part of a scenario; a failure is recorded (not raised), so the
        other parts still run and the report says which part failed and why."""
        try:
            yield
        except Exception as exc:
            log.exception("benchmark %s, %s: failed", self.scenario, name)
            self.errors.append(f"{name}: {type(exc).__name__}: {exc}")

    def value(self, key: str) -> float | None:
        return next((f.value for f in self.figures if f.key == key), None)

    def distribution(self, key: str, label: str, values: Sequence[float], early: int) -> None:
        """Summarise ``values``; the raw series is kept for the plots."""
        ordered = sorted(values)
        self.series[key] = ordered
        self.distributions.append(Distribution(key, label, len(ordered), summary(ordered), early))


def summary(ordered: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/p99.9/max (nearest rank) of an ascending list; empty if none."""
    if not ordered:
        return {}
    values = list(ordered)
    stats = {name: float(quantile(values, q)) for name, q in QUANTILES}
    stats["max"] = float(values[-1])
    return stats


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


# Calls of the one-caller, one-call-at-a-time figures (library and HTTP).
SEQUENTIAL = 2000


def record_sequential(
    rec: Recorder, key: str, latencies_ms: Sequence[float], elapsed_s: float, what: str
) -> None:
    """``<key>_p50`` of calls made one after another, with their p99 and rate."""
    stats = summary(sorted(latencies_ms))
    rec.add(
        f"{key}_p50",
        stats["p50"],
        f"{len(latencies_ms):,} {what} one after another: p99 {stats['p99']:.2f} ms, "
        f"{rate(len(latencies_ms), elapsed_s):,.0f}/s",
    )


# -- isolation ------------------------------------------------------------------


@dataclass(frozen=True)
class Place:
    """A fresh database, and an exchange with a durable queue bound to it (``#``),
    all named ``name``."""

    name: str
    settings: Settings

    def rows(self) -> int:
        db = admin_connection(self.name)
        try:
            with db.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM th_tasks")
                row = cur.fetchone()
                return int(row[0]) if row else 0
        finally:
            db.close()


def query(database: str, statement: str, args: Sequence[object] = ()) -> list[Any]:
    """The rows of one statement, on an admin connection of its own in ``database``."""
    db = admin_connection(database)
    try:
        with db.cursor() as cur:
            cur.execute(statement, tuple(args))
            return list(cur.fetchall())
    finally:
        db.close()


@contextmanager
def isolated(settings: Settings | None = None) -> Iterator[Place]:
    """A :class:`Place` for one scenario; everything is dropped afterwards."""
    from triggerhook.store.mysql import init_schema

    name = f"th_bench_{secrets.token_hex(4)}"
    base = settings or Settings(log_level="WARNING")
    place = Place(
        name,
        replace(
            base,
            database_url=database_url(name),
            amqp_url=amqp_url(),
            exchange=name,
            instance_id="bench",
            dead_letter_queue=f"{name}.dead",
        ),
    )
    init_schema(place.settings.database_url)
    quorum = base.amqp_queue_type == "quorum"  # the cluster's (benchmarks/cluster.py)
    with_channel(lambda ch: _declare(ch, name, {"x-queue-type": "quorum"} if quorum else None))
    try:
        yield place
    finally:
        # A fresh connection: one held through a long scenario would have missed
        # its heartbeats.
        with_channel(lambda ch: _undeclare(ch, name))
        admin_statement(f"DROP DATABASE IF EXISTS `{name}`")


def with_channel(work: Callable[[Any], None]) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url()))
    try:
        work(conn.channel())
    finally:
        conn.close()


def _declare(channel: Any, name: str, arguments: dict[str, str] | None) -> None:
    channel.exchange_declare(name, "topic", durable=True)
    channel.queue_declare(name, durable=True, arguments=arguments)
    channel.queue_bind(name, name, "#")


def _undeclare(channel: Any, name: str) -> None:
    # The engine's dead-letter queue and its command queues too (declared by a
    # daemon of the scenario; deleting a queue that is not there is no error).
    for queue in (name, f"{name}.dead", f"{name}.commands", f"{name}.commands.dead"):
        channel.queue_delete(queue)
    channel.exchange_delete(name)


# -- waiting and timing -----------------------------------------------------------


def wait_until(
    predicate: Callable[[], bool], timeout_s: float, what: str, step_s: float = 0.005
) -> float:
    """Poll until ``predicate`` holds; returns the ``time.time()`` it was seen true."""
    deadline = time.monotonic() + timeout_s
    tick = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached within {timeout_s:.0f} s")
        tick.wait(step_s)
    return time.time()


def in_threads(count: int, work: Callable[[int], None]) -> float:
    """Run ``work(k)`` for k in 0..count-1 in threads; wall seconds until all ended.
    An exception in any thread is raised here after all ended."""
    errors: list[BaseException] = []

    def guarded(k: int) -> None:
        try:
            work(k)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(k,)) for k in range(count)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed_s = time.perf_counter() - started
    if errors:
        raise errors[0]
    return elapsed_s


class Sampler:
    """Samples ``read()`` (cheap counters) every ``interval_s`` on its own thread,
    for throughput-over-time plots."""

    def __init__(self, read: Callable[[], dict[str, int]], interval_s: float = 0.05) -> None:
        self._read = read
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)
        self.samples: list[tuple[float, dict[str, int]]] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self) -> None:
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time() * 1000, self._read()))
            self._stop.wait(self._interval_s)
        self.samples.append((time.time() * 1000, self._read()))


# -- the consumer process ------------------------------------------------------------

# (x-due-ms, x-fired-ms, received epoch ms) of one event.
Event = tuple[int, int, float]


def _consume(queue: str, expected: int, out: Connection, until_s: float | None = None) -> None:
    """Child process: receive ``expected`` events (auto-ack: the cheapest
    delivery), or stop at ``until_s`` (epoch) with what came by then, then send
    back their (due, fired, received) rows."""
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url()))
    channel = conn.channel()
    rows: list[Event] = []
    append = rows.append
    clock = time.time
    out.send("ready")

    def on_message(ch: Any, _method: Any, props: Any, _body: bytes) -> None:
        received_ms = clock() * 1000
        headers = props.headers
        append((headers["x-due-ms"], headers["x-fired-ms"], received_ms))
        if len(rows) >= expected:
            ch.stop_consuming()

    channel.basic_consume(queue, on_message, auto_ack=True)
    if until_s is not None:
        conn.call_later(max(0.0, until_s - time.time()), channel.stop_consuming)
    channel.start_consuming()
    conn.close()
    out.send(rows)


def consume_until(until_s: float) -> Callable[[str, int, Connection], None]:
    """A consumer body that also stops at ``until_s`` (epoch), so that a run
    that fell behind still reports what did arrive."""
    return functools.partial(_consume, until_s=until_s)


class Consumer:
    """Receives events in another process, so that its Python work competes for
    the CPU like any consumer would, but never for the engine's GIL."""

    def __init__(
        self, queue: str, expected: int, target: Callable[[str, int, Connection], None] = _consume
    ) -> None:
        """``target``: the child's body (default: :func:`_consume`)."""
        self._parent, child = mp.Pipe()
        context = mp.get_context("fork")
        self._proc = context.Process(target=target, args=(queue, expected, child), daemon=True)

    def start(self) -> None:
        self._proc.start()
        if not self._parent.poll(30) or self._parent.recv() != "ready":
            raise RuntimeError("the consumer process did not start")

    def events(self, timeout_s: float) -> list[Any]:
        """What the child sent back (:func:`_consume`: a list of :data:`Event`)."""
        if not self._parent.poll(timeout_s):
            raise TimeoutError(f"the consumer did not receive every event in {timeout_s:.0f} s")
        rows: list[Any] = self._parent.recv()
        return rows

    @property
    def pid(self) -> int:
        return self._proc.pid or 0

    def close(self) -> None:
        if self._proc.is_alive():
            self._proc.terminate()
        self._proc.join(10)


@contextmanager
def consuming(
    queue: str, expected: int, target: Callable[[str, int, Connection], None] = _consume
) -> Iterator[Consumer]:
    consumer = Consumer(queue, expected, target)
    consumer.start()
    try:
        yield consumer
    finally:
        consumer.close()


def record_lateness(rec: Recorder, prefix: str, label: str, events: Sequence[Event]) -> None:
    """Two distributions per run: x-fired-ms - x-due-ms (the engine's own
    lateness) and received - due (what a consumer sees)."""
    fired = [float(fired - due) for due, fired, _ in events]
    received = [recv - due for due, _, recv in events]
    fired_early = sum(1 for due, fired, _ in events if fired < due)
    received_early = sum(1 for due, _, recv in events if recv < due)
    rec.distribution(f"{prefix}.fired", f"{label}: x-fired-ms - x-due-ms", fired, fired_early)
    rec.distribution(f"{prefix}.received", f"{label}: received - due", received, received_early)


# -- CPU accounting ---------------------------------------------------------------------


def child_pids(pid: int) -> tuple[int, ...]:
    """The live children of ``pid`` (a daemon's API processes), from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except OSError:
                continue  # ended meanwhile
    return tuple(found)


def daemon_processes(pid: int) -> dict[str, int | tuple[int, ...]]:
    """A ``triggerhook run`` daemon for :class:`CpuMeter`: "daemon" is all of
    its processes, "daemon's API processes" the share of its children."""
    children = child_pids(pid)
    return {"daemon": (pid, *children), "daemon's API processes": children}


def _cpu_s(pids: int | tuple[int, ...]) -> float:
    """User + system CPU seconds of a process (or several, added) so far (0 if gone)."""
    if isinstance(pids, tuple):
        return sum(_cpu_s(pid) for pid in pids)
    pid = pids
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_SERVERS = ("mariadbd", "mysqld", "beam.smp")


def _service_pids() -> dict[str, int]:
    """The benchmarks' MariaDB and RabbitMQ server processes, when they run
    here: the processes listening on their URLs' ports (by name alone, another
    mariadbd, a Galera node of scripts/cluster say, could be taken); by name
    when only one process has it and the sockets could not be read (not root)."""
    servers = {
        "MariaDB": (make_url(database_url("")).port or 3306, ("mariadbd", "mysqld")),
        "RabbitMQ": (
            urlsplit(amqp_url().replace(",", " ").split()[0]).port or 5672,
            ("beam.smp",),
        ),
    }
    found = {}
    for name, (port, commands) in servers.items():
        pid = _listening_pid(port)
        if pid is None:
            named = [int(e) for e in os.listdir("/proc") if e.isdigit() and _comm(e) in commands]
            pid = named[0] if len(named) == 1 else None
        if pid is not None:
            found[name] = pid
    return found


def _listening_pid(port: int) -> int | None:
    """The process with a socket listening on TCP ``port`` (Linux /proc)."""
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as lines:
                rows = [line.split() for line in lines][1:]
        except OSError:
            continue
        sockets |= {
            f"socket:[{row[9]}]"
            for row in rows
            if row[3] == "0A" and int(row[1].rsplit(":", 1)[1], 16) == port  # 0A: LISTEN
        }
    for entry in os.listdir("/proc") if sockets else ():
        if entry.isdigit() and _holds_any(entry, sockets):
            # Not a server (a proxy in a test, say): not metered as one.
            return int(entry) if _comm(entry) in _SERVERS else None
    return None


def _comm(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return ""


def _holds_any(pid: str, sockets: set[str]) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):  # closed meanwhile
            if os.readlink(f"/proc/{pid}/fd/{fd}") in sockets:
                return True
    return False


class CpuMeter:
    """CPU seconds each process used between :meth:`start` and :meth:`stop`:
    the named ones plus the local MariaDB and RabbitMQ servers (Linux /proc)."""

    def __init__(self, processes: dict[str, int | tuple[int, ...]], servers: bool = True) -> None:
        """``processes``: name -> its pid, or several pids counted together;
        ``servers``: the benchmarks' MariaDB and RabbitMQ too."""
        self._pids: dict[str, int | tuple[int, ...]] = {
            **processes,
            **(_service_pids() if servers else {}),
        }
        self._before: dict[str, float] = {}
        self._started_s = 0.0
        self.used: dict[str, float] = {}
        self.wall_s = 0.0

    def start(self) -> None:
        self._started_s = time.monotonic()
        self._before = {name: _cpu_s(pid) for name, pid in self._pids.items()}

    def stop(self) -> None:
        self.wall_s = time.monotonic() - self._started_s
        self.used = {n: _cpu_s(pid) - self._before[n] for n, pid in self._pids.items()}

    def text(self) -> str:
        used = ", ".join(f"{name} {seconds:.1f}" for name, seconds in self.used.items())
        return f"CPU seconds over {self.wall_s:.1f} s on {os.cpu_count()} CPUs: {used}"


# -- row writes (MariaDB's user statistics) ---------------------------------------------


class RowWrites:
    """Rows changed (inserted, updated or deleted) in a database's tables
    between :meth:`start` and :meth:`stop`, from MariaDB's
    ``information_schema.TABLE_STATISTICS`` (``userstat``, switched on here):
    per table of that database only, whatever else the server is doing."""

    def __init__(self, database: str) -> None:
        self._database = database
        self._before: dict[str, int] = {}
        self.changed: dict[str, int] = {}

    def _read(self) -> dict[str, int]:
        db = admin_connection()
        try:
            with db.cursor() as cur:
                cur.execute("SET GLOBAL userstat = 1")
                cur.execute(
                    "SELECT TABLE_NAME, ROWS_CHANGED FROM information_schema.TABLE_STATISTICS"
                    " WHERE TABLE_SCHEMA = %s",
                    (self._database,),
                )
                return {str(name): int(changed) for name, changed in cur.fetchall()}
        finally:
            db.close()

    def start(self) -> None:
        self._before = self._read()

    def stop(self) -> None:
        after = self._read()
        self.changed = {t: n - self._before.get(t, 0) for t, n in after.items()}

    def per_task(self, tasks: int) -> float:
        return sum(self.changed.values()) / max(1, tasks)

    def text(self) -> str:
        return ", ".join(f"{table} {n:,}" for table, n in sorted(self.changed.items()))
