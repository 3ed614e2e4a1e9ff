"""Pending work at scale (issue 16, item 4), through a ``triggerhook run`` daemon.

``pending``: one database grown to each level of pending tasks in turn
(10,000, then 10,000,000), due at random over 30 days starting 2 hours ahead
(nothing of them fires during the run), each with a 100-byte payload. At each
level, before a fresh daemon starts: the table's and each index's size, and the
daemon's two arming reads timed on their own (``ARM_READS`` over every shard
for a 1 s window in the middle of the 30 days; ``ANY_DUE`` over every shard).
Then, for ``seconds``, a steady 1,000 fires/s due now (posted ahead, as in
``precision``) while one client makes single HTTP requests one at a time,
``PROBES_PER_S`` pairs a second: a create of a far-future task and a cancel
of a random pending task. Per level: firing lateness (x-fired-ms - x-due-ms),
create and cancel latency, the daemon's memory (RSS of all its processes),
and what arming costs MariaDB: rows read from ``th_tasks`` and MariaDB CPU per
fired task. The levels' figures side by side are the steps table of the report.

The pending rows are written server-side, by ``INSERT … SELECT`` from
MariaDB's Sequence engine, with the values the engine writes (shard =
CRC32(id) mod the shard count, the shard's generation, a random revision and a
UUID-shaped random id): through the engine's ``schedule_many``, 10,000,000
rows would take most of an hour here (measured: 17,700 rows/s over the first
1,500,000 with a 6 GiB buffer pool, falling; 7,100/s over the first 500,000
with MariaDB's default 128 MiB, 3,400/s by then). The probes' creates go
through the engine as usual.

``same_second``: ``burst_n`` (1,000,000) tasks due within the same second,
written the same way before a daemon starts; from the second's start until
the last event is received and the last row deleted. The daemon's in-memory
count (``GET /v1/status``, its metrics period 100 ms) and RSS are sampled every
100 ms: memory stays within ``max_tasks_in_memory`` (50,000 by default)
however many are due; the drain rate is reported.

Needs MariaDB (the Sequence engine); the server's buffer pool size is in the
report's header.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import httpx
import uvloop

from benchmarks.common import (
    FAR_FUTURE_MS,
    CpuMeter,
    Event,
    Place,
    Recorder,
    Sampler,
    admin_connection,
    child_pids,
    consuming,
    daemon_processes,
    isolated,
    query,
    rate,
    record_lateness,
    summary,
    wait_until,
)
from benchmarks.http import daemon, post_batches
from benchmarks.precision import due_times
from triggerhook import Settings
from triggerhook.domain.arming import TOP_ID, ShardMarks
from triggerhook.store.mysql import sql
from triggerhook.store.mysql.tables import arm_probe

LEVELS = (10_000, 10_000_000)
QUICK_LEVELS = (1_000, 20_000)
BURST_N = 1_000_000
QUICK_BURST_N = 20_000
QUICK_MAX_IN_MEMORY = 5_000  # below QUICK_BURST_N, so that the bound is tested
FIRES_PER_S = 1000
PROBES_PER_S = 50
DAY_MS = 86_400_000
SPREAD_MS = 30 * DAY_MS
AHEAD_MS = 2 * 3_600_000  # the pending tasks' first due time, from the run's start
# Rows a fill statement: each well within the 30 s read timeout (100,000 were
# not, past 1M rows in a 128 MiB buffer pool: same_second and 10M pending failed).
FILL_CHUNK = 20_000
PAYLOAD = b'{"order": 1234567, "action": "charge", "currency": "EUR", "note": "' + b"x" * 33 + b'"}'
REPEATS = 30
MIB = 1 << 20
BACKGROUND_S = 15  # MariaDB's own CPU measured this long before a level's daemon

# The fill: ids, revisions and due times from MD5(salt, seq), so the benchmark
# knows every id (task_id below) without reading them back.
_FILL = (
    "INSERT INTO th_tasks (id, shard, rev, gen, fire_ms, due_ms, routing_key, payload)"
    " SELECT v.id, v.shard, v.rev, s.arm_gen, v.fire_ms, v.fire_ms, %s, %s"
    " FROM (SELECT x.id, CRC32(x.id) %% %s AS shard,"
    " CONV(SUBSTR(x.h, 13, 15), 16, 10) AS rev,"
    " %s + CONV(SUBSTR(x.h, 1, 12), 16, 10) %% %s AS fire_ms"
    " FROM (SELECT h, CONCAT_WS('-', SUBSTR(h, 1, 8), SUBSTR(h, 9, 4), SUBSTR(h, 13, 4),"
    " SUBSTR(h, 17, 4), SUBSTR(h, 21, 12)) AS id"
    " FROM (SELECT MD5(CONCAT(%s, seq)) AS h FROM seq_{first}_to_{last}) a) x) v"
    " JOIN th_shards s ON s.shard = v.shard"
)
_INDEX_PAGES = (
    "SELECT index_name, stat_value FROM mysql.innodb_index_stats"
    " WHERE database_name = %s AND table_name = 'th_tasks' AND stat_name = 'size'"
)
_ROWS_READ = (
    "SELECT ROWS_READ FROM information_schema.TABLE_STATISTICS"
    " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'th_tasks'"
)


def task_id(salt: str, seq: int) -> str:
    """The id the fill gives row ``seq`` (1-based)."""
    h = hashlib.md5(f"{salt}{seq}".encode(), usedforsecurity=False).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


# -- the fill and the server's view ---------------------------------------------------


def fill(place: Place, first: int, last: int, start_ms: int, spread_ms: int) -> float:
    """Rows ``first``..``last`` (1-based, inclusive), due in [start_ms,
    start_ms + spread_ms); the rows/s it took."""
    db = admin_connection(place.name)
    started = time.perf_counter()
    try:
        with db.cursor() as cur:
            cur.execute(sql.READ_SHARD_COUNT)
            shard_count = int(cur.fetchone()[0])
            for low in range(first, last + 1, FILL_CHUNK):
                high = min(last, low + FILL_CHUNK - 1)
                cur.execute(
                    _FILL.format(first=low, last=high),
                    ("pending", PAYLOAD, shard_count, start_ms, spread_ms, place.name),
                )
    finally:
        db.close()
    return rate(last - first + 1, time.perf_counter() - started)


def _sizes_mib(place: Place) -> dict[str, float]:
    """Each index of th_tasks (PRIMARY: the rows) in MiB, by InnoDB's page
    counts after ANALYZE TABLE."""
    query(place.name, "ANALYZE TABLE th_tasks")
    page_size = int(query(place.name, "SELECT @@innodb_page_size")[0][0])
    rows = query("mysql", _INDEX_PAGES, (place.name,))
    return {str(name): int(pages) * page_size / MIB for name, pages in rows}


def _rows_read(database: str) -> int:
    query(database, "SET GLOBAL userstat = 1")
    rows = query(database, _ROWS_READ, (database,))
    return int(rows[0][0]) if rows else 0


def _arm_read(
    shard_count: int, low_ms: int, high_ms: int, gen: int, limit: int
) -> tuple[str, list[int]]:
    """The arming pass's reads (store/arm_pass.py) for every shard: its
    watermark at ``low_ms``, its horizon ``high_ms``, the fresh rows those of
    generation ``gen``."""
    ranged = " OR ".join([sql.ARM_RANGED_SHARD] * shard_count)
    fresh = " OR ".join([sql.ARM_FRESH_BELOW] * shard_count)
    args: list[int] = []
    for shard in range(shard_count):
        args += [shard, low_ms, high_ms]
    args.append(limit)
    for shard in range(shard_count):
        args += [shard, gen, low_ms]
    args.append(limit)
    return sql.ARM_READS.format(ranged=ranged, fresh=fresh), args


def _timed_ms(database: str, statement: str, args: Sequence[object]) -> tuple[float, int]:
    """The median time of ``statement`` over REPEATS runs on one connection,
    and the rows it returned."""
    db = admin_connection(database)
    times_ms: list[float] = []
    rows = 0
    try:
        with db.cursor() as cur:
            for _ in range(REPEATS):
                started = time.perf_counter()
                cur.execute(statement, tuple(args))
                rows = len(cur.fetchall())
                times_ms.append((time.perf_counter() - started) * 1000)
    finally:
        db.close()
    return summary(sorted(times_ms))["p50"], rows


# -- a daemon's memory -----------------------------------------------------------------


def _rss_kib(pid: int, field_name: str = "VmRSS") -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def daemon_rss_mib(pid: int, field_name: str = "VmRSS") -> float:
    """RSS (or VmHWM: its peak) of a daemon's processes, added."""
    return sum(_rss_kib(p, field_name) for p in (pid, *child_pids(pid))) / 1024


# -- pending: the levels ---------------------------------------------------------------


@dataclass
class Probes:
    """Single creates and cancels, one at a time, while the steady load fires."""

    url: str
    salt: str
    level: int
    victims: list[int]  # fill numbers of the pending tasks to cancel, in order
    create_ms: list[float] = field(default_factory=list)
    cancel_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def run(self, until_s: float) -> None:
        far_s = time.time() + 2 * FAR_FUTURE_MS / 1000  # beyond nothing: never fires here
        pace = threading.Event()
        with httpx.Client(base_url=self.url, timeout=30) as http:
            k = 0
            while time.time() < until_s and k < len(self.victims):
                next_s = time.monotonic() + 1 / PROBES_PER_S
                body = {
                    "id": f"probe-{self.level}-{k}",
                    "at": far_s + k / 1000,
                    "routing_key": "probe",
                }
                create = http.build_request("POST", "/v1/tasks", json=body)
                self._call(http, self.create_ms, 201, create)
                victim = task_id(self.salt, self.victims[k])
                cancel = http.build_request("DELETE", f"/v1/tasks/{victim}")
                self._call(http, self.cancel_ms, 204, cancel)
                k += 1
                pace.wait(max(0.0, next_s - time.monotonic()))

    def _call(
        self, http: httpx.Client, into: list[float], expected: int, request: httpx.Request
    ) -> None:
        started = time.perf_counter()
        answer = http.send(request)
        into.append((time.perf_counter() - started) * 1000)
        if answer.status_code != expected and len(self.errors) < 5:
            self.errors.append(f"{answer.request.method} answered {answer.status_code}")


@dataclass(frozen=True)
class Steady:
    """What a level's steady run measured."""

    events: list[Event]
    probes: Probes
    cpu: CpuMeter
    rows_read: int  # from th_tasks, over the run
    rss_mib: float  # the daemon's, at the end
    background_cores: float  # MariaDB's CPU with no daemon, just before


def run(rec: Recorder, levels: Sequence[int], seconds: int) -> None:
    """Each level of ``levels`` (ascending) in one growing database."""
    with isolated() as place:
        start_ms = int(time.time() * 1000) + AHEAD_MS
        filled = 0
        for level in levels:
            with rec.part(f"{level:,} pending"):
                fill_rate = fill(place, filled + 1, level, start_ms, SPREAD_MS)
                # Cancelled once each: drawn from the rows new at this level.
                victims = random.Random(level).sample(
                    range(filled + 1, level + 1), min(level - filled, seconds * PROBES_PER_S)
                )
                filled = level
                _level(rec, place, level, seconds, (start_ms, fill_rate), victims)


def _level(
    rec: Recorder,
    place: Place,
    level: int,
    seconds: int,
    filled_at: tuple[int, float],
    victims: list[int],
) -> None:
    """``filled_at``: the pending tasks' first due time (epoch ms), the fill's rows/s."""
    start_ms, fill_rate = filled_at
    prefix = f"pending.{level}"
    sizes = _sizes_mib(place)
    data_mib = sizes.pop("PRIMARY", 0.0)
    rec.add(
        f"{prefix}.table_mib",
        data_mib,
        f"{level:,} rows written at {fill_rate:,.0f} rows/s (server-side INSERT … SELECT)",
    )
    rec.add(
        f"{prefix}.index_mib",
        sum(sizes.values()),
        ", ".join(f"{name} {mib:,.1f}" for name, mib in sorted(sizes.items())),
    )
    _arming_reads(rec, prefix, place, start_ms)
    background_cores = _mariadb_cores(min(BACKGROUND_S, seconds))  # quick mode: shorter
    with daemon(place.settings) as running:
        probes = Probes(running.url, place.name, level, victims)
        run = _steady(place, (running.url, running.pid), probes, seconds)
    _record_steady(rec, prefix, replace(run, background_cores=background_cores))


def _mariadb_cores(seconds: float) -> float:
    """MariaDB's CPU over ``seconds`` (its background work: flushing the fill's
    pages, purge) in cores; 0 when it is not metered (not on this machine)."""
    cpu = CpuMeter({})
    cpu.start()
    threading.Event().wait(seconds)
    cpu.stop()
    return cpu.used.get("MariaDB", 0.0) / cpu.wall_s


def _arming_reads(rec: Recorder, prefix: str, place: Place, start_ms: int) -> None:
    shard_count = int(query(place.name, sql.READ_SHARD_COUNT)[0][0])
    middle_ms = start_ms + SPREAD_MS // 2
    # A generation no row has yet, as after a pass when nothing was written since.
    gen = int(query(place.name, "SELECT MAX(arm_gen) FROM th_shards")[0][0]) + 1
    statement, args = _arm_read(
        shard_count, middle_ms, middle_ms + 1000, gen, place.settings.arm_batch_size
    )
    arm_ms, arm_rows = _timed_ms(place.name, statement, args)
    rec.add(
        f"{prefix}.arm_read_ms",
        arm_ms,
        f"ARM_READS, {shard_count} shards, a 1 s window mid-way ({arm_rows} rows); "
        f"median of {REPEATS}, no daemon running",
    )
    shards = ", ".join(["%s"] * shard_count)
    any_due_ms, _ = _timed_ms(
        place.name, sql.ANY_DUE.format(shards=shards), [*range(shard_count), middle_ms]
    )
    rec.add(f"{prefix}.any_due_ms", any_due_ms, f"ANY_DUE, {shard_count} shards; median")
    # Between full passes: every watermark already past the bound (the usual case).
    held = {s: ShardMarks((middle_ms + 1000, TOP_ID), gen) for s in range(shard_count)}
    probe_ms, _ = _timed_ms(place.name, *arm_probe(held, middle_ms + 500))
    rec.add(f"{prefix}.probe_ms", probe_ms, f"the skip probe, {shard_count} shards; median")


def _steady(place: Place, running: tuple[str, int], probes: Probes, seconds: int) -> Steady:
    """``running``: the daemon's URL and pid."""
    url, pid = running
    n = seconds * FIRES_PER_S
    start_ms = int(time.time() * 1000) + 3000 + n // 20  # the batches in before the first
    tasks: list[dict[str, object]] = [
        {"at": due_ms / 1000, "routing_key": "steady"}
        for due_ms in due_times(start_ms, seconds, FIRES_PER_S)
    ]
    uvloop.run(post_batches(url, tasks))
    with consuming(place.name, n) as consumer:
        threading.Event().wait(max(0.0, start_ms / 1000 - time.time()))
        cpu = CpuMeter(daemon_processes(pid))
        cpu.start()
        rows_before = _rows_read(place.name)
        probes.run(start_ms / 1000 + seconds)
        events = consumer.events(seconds + 60)
        rows_read = _rows_read(place.name) - rows_before
        cpu.stop()
        rss_mib = daemon_rss_mib(pid)
    if probes.errors:
        raise RuntimeError("probe requests failed: " + "; ".join(probes.errors))
    return Steady(events, probes, cpu, rows_read, rss_mib, 0.0)


def _record_steady(rec: Recorder, prefix: str, run: Steady) -> None:
    events, probes, cpu = run.events, run.probes, run.cpu
    record_lateness(rec, prefix, f"{prefix}: steady {FIRES_PER_S:,}/s", events)
    fired, received = rec.distributions[-2], rec.distributions[-1]
    for measure in ("fired", "received"):  # no plot draws them
        del rec.series[f"{prefix}.{measure}"]
    fires = max(1, len(events))
    rec.add(f"{prefix}.fired_p50", fired.stats["p50"], f"{len(events):,} fires; {cpu.text()}")
    rec.add(f"{prefix}.fired_p99", fired.stats["p99"], f"max {fired.stats['max']:.1f} ms")
    rec.add(
        f"{prefix}.early",
        fired.early + received.early,
        f"{fired.early} with x-fired-ms < x-due-ms, {received.early} received before due",
    )
    for key, latencies in (("create", probes.create_ms), ("cancel", probes.cancel_ms)):
        stats = summary(sorted(latencies))
        rec.add(f"{prefix}.{key}_p50", stats["p50"], f"{len(latencies):,} one at a time")
        rec.add(f"{prefix}.{key}_p99", stats["p99"], f"max {stats['max']:.1f} ms")
    rec.add(f"{prefix}.rss_mib", run.rss_mib, "all the daemon's processes, after the run")
    rec.add(
        f"{prefix}.rows_read_per_fire",
        run.rows_read / fires,
        f"{run.rows_read:,} th_tasks rows read (TABLE_STATISTICS) over {fires:,} fires, "
        "the probes' creates and cancels included",
    )
    if "MariaDB" in cpu.used:
        used_s = cpu.used["MariaDB"]
        background_s = run.background_cores * cpu.wall_s
        rec.add(
            f"{prefix}.cpu_mariadb_us",
            used_s / fires * 1e6,
            f"{used_s:.1f} CPU-s over {fires:,} fires in {cpu.wall_s:.1f} s",
        )
        rec.add(
            f"{prefix}.cpu_mariadb_net_us",
            (used_s - background_s) / fires * 1e6,
            f"less {run.background_cores:.2f} cores of background work, measured with no "
            f"daemon just before ({background_s:.1f} CPU-s over the run)",
        )


# -- same_second: many due in one second ---------------------------------------------


def same_second(rec: Recorder, n: int, max_in_memory: int | None = None) -> None:
    """``max_in_memory``: the daemon's max_tasks_in_memory (None: its default)."""
    base = Settings(log_level="WARNING")
    if max_in_memory is not None:
        base = replace(base, max_tasks_in_memory=max_in_memory)
    with isolated(base) as place:
        # Filled before the daemon starts; due once it runs. The fill's rate is
        # the server's: 15,000 rows/s on a good day, 4,000 on this project's
        # machine (1M rows in a 128 MiB buffer pool), where ``n // 15`` left
        # the daemon ready after the tasks were due. Waiting costs only time.
        due_ms = int(time.time() * 1000) + 10_000 + n // 3
        fill_rate = fill(place, 1, n, due_ms, 1000)
        extra = {
            "metrics_interval_ms": "100",
            "max_tasks_in_memory": str(place.settings.max_tasks_in_memory),
        }
        with consuming(place.name, n) as consumer, daemon(place.settings, extra) as running:
            if time.time() * 1000 > due_ms - 1000:
                raise RuntimeError("the daemon was ready after the tasks were due")
            sampler = Sampler(_memory_reader(running.url, running.pid), interval_s=0.1)
            sampler.start()
            cpu = CpuMeter({**daemon_processes(running.pid), "consumer": consumer.pid})
            threading.Event().wait(max(0.0, due_ms / 1000 - time.time()))
            cpu.start()
            try:
                deleted_s = wait_until(
                    lambda: not _any_row(place), 60 + n / 500, "rows deleted", step_s=0.05
                )
                events = consumer.events(60 + n / 500)
            finally:
                sampler.stop()
                sampler.join()
            cpu.stop()
            peak_mib = daemon_rss_mib(running.pid, "VmHWM")
    _record_same_second(rec, place, n, due_ms, events, deleted_s, sampler, cpu, peak_mib)
    rec.add("same_second.fill_rate", fill_rate, "server-side INSERT … SELECT, before the daemon")


def _memory_reader(url: str, pid: int) -> Callable[[], dict[str, int]]:
    def read() -> dict[str, int]:
        counts = {"rss_kib": int(daemon_rss_mib(pid) * 1024)}
        try:
            period = httpx.get(f"{url}/v1/status", timeout=5).json().get("period") or {}
        except httpx.HTTPError:
            return counts  # a sample without the count, rather than a dead sampler
        if "in_memory" in period:
            counts["in_memory"] = int(period["in_memory"])
        return counts

    return read


def _any_row(place: Place) -> bool:
    return bool(query(place.name, "SELECT 1 FROM th_tasks LIMIT 1"))


def _record_same_second(
    rec: Recorder,
    place: Place,
    n: int,
    due_ms: int,
    events: list[Event],
    deleted_s: float,
    sampler: Sampler,
    cpu: CpuMeter,
    peak_mib: float,
) -> None:
    received_ms = max(e[2] for e in events)
    end_s = (max(received_ms, deleted_s * 1000) - due_ms) / 1000
    rec.add(
        "same_second.drain_tasks_per_s",
        rate(n, end_s),
        f"{n:,} due within one second; {len(events):,} received, the last "
        f"{(received_ms - due_ms) / 1000:.1f} s and the last row deleted "
        f"{deleted_s - due_ms / 1000:.1f} s after the second began; {cpu.text()}",
    )
    held = [counts["in_memory"] for _, counts in sampler.samples if "in_memory" in counts]
    rss = [counts["rss_kib"] / 1024 for _, counts in sampler.samples]
    rec.add(
        "same_second.in_memory_max",
        max(held, default=0),
        f"the daemon's in-memory count, {len(held)} samples 100 ms apart "
        f"(max_tasks_in_memory {place.settings.max_tasks_in_memory:,})",
    )
    rec.add(
        "same_second.rss_max_mib",
        max(rss, default=0.0),
        f"RSS of the daemon's processes, sampled; peak (VmHWM) {peak_mib:,.0f} MiB",
    )
    record_lateness(rec, "same_second", f"{n:,} due in one second", events)
    fired, received = rec.distributions[-2], rec.distributions[-1]
    rec.add("same_second.fired_p50", fired.stats["p50"])
    rec.add("same_second.fired_max", fired.stats["max"])
    rec.add("same_second.early", fired.early + received.early)
    if len(events) < n:
        raise RuntimeError(f"{n - len(events):,} of {n:,} events not received")
