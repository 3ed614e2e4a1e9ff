"""What the benchmarks report: every figure's label, unit and target, the
ceilings each is compared with, and Trigger Hook's figures beside them.

:mod:`benchmarks.report` evaluates a run's recorders against this catalogue.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    op: str  # ">=" or "<=" or "=="
    bound: float

    def met(self, value: float) -> bool:
        if self.op == ">=":
            return value >= self.bound
        if self.op == "<=":
            return value <= self.bound
        return value == self.bound

    def text(self, unit: str) -> str:
        op = {">=": "≥", "<=": "≤", "==": "="}[self.op]
        return f"{op} {format_number(self.bound, unit)} {unit}"


@dataclass(frozen=True)
class Spec:
    key: str
    scenario: str
    label: str
    unit: str
    target: Target | None = None
    ceilings: tuple[str, ...] = ()
    th_here: str = ""  # Trigger Hook (Go) measured on this machine
    th_aws: str = ""  # Trigger Hook's published figure (AWS t2.micro + RDS db.t3.micro)
    th_here_value: float | None = None
    # The figure of Trigger Hook's own benchmark in the same run
    # (``--trigger-hook PATH``, benchmarks/peer.py): when there is one, the
    # ratio is to it instead of to ``th_here_value``.
    peer: str = ""


def _ge(bound: float) -> Target:
    return Target(">=", bound)


def _le(bound: float) -> Target:
    return Target("<=", bound)


_NONE_EARLY = Target("==", 0)
_TH_PRECISION = "1 s (its precision)"

CEILING_SPECS = (
    Spec("ceiling.insert", "ceilings", "raw INSERT (multi-row)", "rows/s"),
    Spec("ceiling.read", "ceilings", "raw range SELECT by shard and fire time", "rows/s"),
    Spec("ceiling.delete", "ceilings", "raw batched DELETE by id", "rows/s"),
    Spec("ceiling.publish", "ceilings", "raw pika publish, pipelined confirms", "msgs/s"),
    Spec(
        "ceiling.publish_frames",
        "ceilings",
        "raw publish, pre-encoded frames, pipelined confirms",
        "msgs/s",
    ),
    Spec("ceiling.heapq", "ceilings", "heapq push + pop", "pairs/s"),
)

_ENGINE_SPECS: tuple[Spec, ...] = (
    Spec(
        "create.schedule_many",
        "create",
        "create: `schedule_many`, all in one call",
        "tasks/s",
        _ge(50_000),
        ("ceiling.insert",),
    ),
    Spec(
        "create.schedule_x8",
        "create",
        "create: single `schedule`, 8 threads",
        "tasks/s",
        _ge(15_000),
        ("ceiling.insert",),
        "4,316/s (8 goroutines)",
        "1,396/s",
        4316,
        peer="trigger_hook.create",
    ),
    Spec(
        "create.http_batch",
        "create",
        "create: HTTP `POST /v1/tasks/batch` (10,000 a request, 2 in flight)",
        "tasks/s",
        _ge(30_000),
        ("ceiling.insert",),
    ),
    Spec(
        "create.http_single",
        "create",
        "create: HTTP single `POST /v1/tasks`, 32 clients",
        "req/s",
        _ge(8_000),
        ("ceiling.insert",),
    ),
    Spec(
        "create.http_single_p99",
        "create",
        "create: HTTP single `POST /v1/tasks`, latency p99",
        "ms",
        _le(20),
    ),
    # One client, one call at a time (the capacity issue's target: p50 ≤ 1 ms).
    Spec(
        "create.sequential_p50",
        "create",
        "create: single `schedule`, one caller, one call at a time: latency p50",
        "ms",
        _le(1),
    ),
    Spec(
        "create.http_sequential_p50",
        "create",
        "create: HTTP single `POST /v1/tasks`, one client, one at a time: latency p50",
        "ms",
        _le(1),
    ),
    Spec(
        "delete.sequential_p50",
        "delete",
        "delete: single `cancel`, one caller, one call at a time: latency p50",
        "ms",
        _le(1),
    ),
    Spec(
        "delete.http_sequential_p50",
        "delete",
        "delete: HTTP `DELETE /v1/tasks/{id}`, one client, one at a time: latency p50",
        "ms",
        _le(1),
    ),
    Spec(
        "delete.cancel_x8",
        "delete",
        "delete: single `cancel`, 8 threads",
        "tasks/s",
        _ge(20_000),
        ("ceiling.delete",),
        "7,050/s",
        "1,920/s",
        7050,
        peer="trigger_hook.delete",
    ),
    Spec(
        "delete.http_single",
        "delete",
        "delete: HTTP `DELETE /v1/tasks/{id}`, 32 clients",
        "req/s",
        None,
        ("ceiling.delete",),
    ),
    Spec(
        "delete.http_single_p99",
        "delete",
        "delete: HTTP `DELETE /v1/tasks/{id}`, latency p99",
        "ms",
    ),
    Spec(
        "sending.no_broker",
        "sending",
        "sending: overdue rows → arm (one write a shard) → heap → send buffer (no broker)",
        "tasks/s",
        _ge(250_000),
        ("ceiling.read", "ceiling.heapq"),
        "488,304/s",
        "200,668/s",
        488_304,
        peer="trigger_hook.sending",
    ),
    Spec(
        "confirm.delete",
        "sending",
        "confirm: confirmed ids → rows deleted in batches",
        "tasks/s",
        _ge(100_000),
        ("ceiling.delete",),
        "142,468/s",
        "49,905/s",
        142_468,
        peer="trigger_hook.confirm",
    ),
    Spec(
        "sending.broker",
        "sending",
        "sending through RabbitMQ: overdue rows → published and confirmed",
        "tasks/s",
        None,
        ("ceiling.publish", "ceiling.publish_frames"),
    ),
    Spec(
        "burst.end_to_end",
        "burst",
        "burst: all due at one instant → last event received and last row deleted",
        "tasks/s",
        _ge(20_000),
        ("ceiling.publish", "ceiling.publish_frames"),
    ),
    Spec(
        "burst.row_writes",
        "burst",
        "row writes per fired task (insert, arm, delete), from MariaDB's table statistics",
        "rows/task",
        _le(2.2),
    ),
    Spec(
        "near_due.fired_p99",
        "near_due",
        "100 ms ahead through an instance owning none of the shards: lateness p99",
        "ms",
        _le(10),
    ),
    Spec(
        "precision.idle.cpu_mariadb_us",
        "precision",
        "steady 1,000/s: MariaDB CPU per fired task",
        "µs",
        _le(100),
    ),
    Spec(
        "precision.idle.cpu_daemon_us",
        "precision",
        "steady 1,000/s: daemon CPU per fired task (all its processes)",
        "µs",
    ),
    Spec(
        "precision.idle.cpu_both_us",
        "precision",
        "steady 1,000/s: daemon + MariaDB CPU per fired task",
        "µs",
        _le(150),
    ),
    Spec(
        "precision.idle.fired_p50",
        "precision",
        "precision, steady 1,000/s: lateness p50 (x-fired - x-due)",
        "ms",
        _le(1),
        th_here=_TH_PRECISION,
        th_aws=_TH_PRECISION,
    ),
    Spec(
        "precision.idle.fired_p99",
        "precision",
        "precision, steady 1,000/s: lateness p99",
        "ms",
        _le(2),
        th_here=_TH_PRECISION,
        th_aws=_TH_PRECISION,
    ),
    Spec(
        "precision.idle.early",
        "precision",
        "precision, steady: events early",
        "events",
        _NONE_EARLY,
    ),
    Spec(
        "precision.http_load.requests",
        "precision",
        "precision + HTTP load: single POSTs from 32 clients",
        "req/s",
    ),
    Spec(
        "precision.http_load.fired_p50",
        "precision",
        "precision + HTTP load: lateness p50",
        "ms",
        _le(1),
    ),
    Spec(
        "precision.http_load.fired_p99",
        "precision",
        "precision + HTTP load: lateness p99",
        "ms",
        _le(2),
    ),
    Spec(
        "precision.http_load.early",
        "precision",
        "precision + HTTP load: events early",
        "events",
        _NONE_EARLY,
    ),
    Spec(
        "precision.http_load.fired_max",
        "precision",
        "precision + HTTP load: lateness max",
        "ms",
        _le(10),
    ),
    Spec(
        "precision.http_load_one.requests",
        "precision",
        "precision + HTTP load, all in one process (api_processes = 0): POSTs",
        "req/s",
    ),
    Spec(
        "precision.http_load_one.fired_p50",
        "precision",
        "precision + HTTP load, all in one process: lateness p50",
        "ms",
    ),
    Spec(
        "precision.http_load_one.fired_p99",
        "precision",
        "precision + HTTP load, all in one process: lateness p99",
        "ms",
    ),
    Spec(
        "precision.http_load_one.fired_max",
        "precision",
        "precision + HTTP load, all in one process: lateness max",
        "ms",
    ),
    Spec(
        "precision.http_load_one.early",
        "precision",
        "precision + HTTP load, all in one process: events early",
        "events",
        _NONE_EARLY,
    ),
    Spec(
        "capacity.held_fires_per_s",
        "capacity",
        "capacity: highest steady rate held (p99 ≤ 5 ms, none early or lost, no growing backlog)",
        "fires/s",
        _ge(5_000),
    ),
    Spec("hostile.fired_p50", "hostile", "hostile input: probe lateness p50", "ms"),
    Spec("hostile.fired_p99", "hostile", "hostile input: probe lateness p99", "ms", _le(10)),
    Spec(
        "hostile.fired_max",
        "hostile",
        "hostile input (300,000-digit times, 10 MB bodies, 600 unroutable tasks, "
        "300 slow clients): probe lateness max",
        "ms",
        _le(50),
    ),
    Spec("hostile.early", "hostile", "hostile input: probes early", "events", _NONE_EARLY),
    Spec("hostile.missing", "hostile", "hostile input: probes not received", "events", _NONE_EARLY),
    Spec(
        "hostile.dead_letters",
        "hostile",
        "hostile input: unroutable tasks dead-lettered",
        "events",
    ),
    # The bound is the default shard_lease_ms (10 s) + 5 s; --quick runs a 2 s lease.
    Spec(
        "takeover.time_s",
        "takeover",
        "takeover: kill -9 of one of two daemons → the survivor owns every shard",
        "s",
        _le(15),
    ),
    Spec("takeover.lost", "takeover", "takeover: tasks never received", "tasks", _NONE_EARLY),
    Spec("takeover.duplicates", "takeover", "takeover: events received twice", "events"),
    Spec(
        "takeover.late_max_ms",
        "takeover",
        "takeover: latest event of the killed daemon's shards, received - due",
        "ms",
    ),
)


@dataclass(frozen=True)
class StepSpec:
    """A figure a stepped scenario measures once a step, ``<scenario>.<step>.<measure>``
    (capacity: a step a rate). The steps are the run's parameters, so
    :func:`evaluate` makes a :class:`Spec` of it for every step recorded."""

    measure: str
    label: str  # "{step:,}" stands for the step (an integer)
    unit: str
    column: str  # its heading in the steps table


_PAGE = _le(20)  # issue 14: a page of 100 at 1,000,000 pending
_COUNTS = _le(200)  # issue 14: counts per routing key
LISTING_SPECS = (
    Spec("listing.fill_rate", "listing", "listing: filling, tagged tasks over HTTP", "tasks/s"),
    Spec("listing.page_first", "listing", "listing: first page of 100", "ms", _PAGE),
    Spec("listing.page_deep", "listing", "listing: a page half-way in due order", "ms", _PAGE),
    Spec("listing.page_key", "listing", "listing: a routing key's page", "ms", _PAGE),
    Spec("listing.page_tag", "listing", "listing: a tag's page", "ms", _PAGE),
    Spec("listing.page_prefix", "listing", "listing: an id prefix's page", "ms", _PAGE),
    Spec("listing.page_cursor", "listing", "listing: the 10th page of a cursor walk", "ms", _PAGE),
    Spec("listing.count_tag", "listing", "listing: count of a tag", "ms"),
    Spec("listing.count_key", "listing", "listing: count of a routing key", "ms"),
    Spec("listing.count_all", "listing", "listing: count of every task", "ms"),
    # issue 29: what a read of many tasks costs must not grow with the table.
    Spec("listing.count_up_to", "listing", "listing: count up to 1,000", "ms", _PAGE),
    Spec("listing.firing_none", "listing", "listing: state=firing, none armed", "ms", _PAGE),
    Spec(
        "listing.timeline_hour",
        "listing",
        "listing: counts per routing key, next hour by minute",
        "ms",
        _COUNTS,
    ),
    Spec(
        "listing.timeline_month",
        "listing",
        "listing: counts per routing key, 30 days by hour (every task read)",
        "ms",
        _COUNTS,
    ),
    Spec(
        "listing.cancel.fired_p99",
        "listing",
        "bulk cancel: firing lateness p99 while it runs",
        "ms",
        _le(5),
    ),
    Spec("listing.cancel.early", "listing", "bulk cancel: events early", "events", _NONE_EARLY),
    Spec("listing.cancel.rate", "listing", "bulk cancel: tasks cancelled", "tasks/s"),
    Spec(
        "listing.cancel.before_p99",
        "listing",
        "bulk cancel: firing lateness p99 before it (the same run)",
        "ms",
    ),
)
# Issue 16: many due in the same second; the bound is the default
# max_tasks_in_memory (quick mode runs 5,000; each run's is in the detail).
_SAME = "1,000,000 (quick: 20,000) due in one second"
SAME_SECOND_SPECS = (
    Spec(
        "same_second.drain_tasks_per_s",
        "same_second",
        f"{_SAME}: from its start to the last event received and the last row deleted",
        "tasks/s",
    ),
    Spec(
        "same_second.in_memory_max",
        "same_second",
        f"{_SAME}: tasks in the daemon's memory, most sampled",
        "tasks",
        _le(50_000),
    ),
    Spec(
        "same_second.rss_max_mib", "same_second", f"{_SAME}: the daemon's RSS, most sampled", "MiB"
    ),
    Spec("same_second.fired_p50", "same_second", f"{_SAME}: lateness p50", "ms"),
    Spec("same_second.fired_max", "same_second", f"{_SAME}: lateness max", "ms"),
    Spec("same_second.early", "same_second", f"{_SAME}: events early", "events", _NONE_EARLY),
    Spec("same_second.fill_rate", "same_second", f"{_SAME}: the fill", "rows/s"),
)
# Issue 32: a backlog due at once on a key limited to its rate, beside a steady key.
_BACKLOG = "100,000 due at once on a key limited to 5,000/s (quick: 2,000 at 1,000/s)"
THROTTLE_SPECS = (
    Spec("throttle.drain_rate", "throttle", f"{_BACKLOG}: the rate it left at", "tasks/s"),
    Spec(
        "throttle.drain_error",
        "throttle",
        f"{_BACKLOG}: |drain rate / limit - 1|",
        "ratio",
        _le(0.05),
    ),
    Spec("throttle.alone_p99", "throttle", "steady 1,000/s alone: lateness p99", "ms"),
    Spec("throttle.beside_p99", "throttle", "the same beside the backlog: lateness p99", "ms"),
    Spec(
        "throttle.p99_added_ms",
        "throttle",
        "the steady key's lateness p99 beside the backlog, less alone",
        "ms",
        _le(5),
    ),
    Spec("throttle.early", "throttle", "backlog and steady: events early", "events", _NONE_EARLY),
)
# Issue 33: a namespace flooding its create quota beside another's steady firing.
_FLOOD = "a namespace sending creates as fast as answered, at create_rate 100/s"
FLOOD_SPECS = (
    Spec("flood.alone_p99", "flood", "steady 1,000/s alone: lateness p99", "ms"),
    Spec("flood.beside_p99", "flood", f"the same beside {_FLOOD}: lateness p99", "ms"),
    Spec(
        "flood.p99_added_ms",
        "flood",
        "the steady namespace's lateness p99 beside the flood, less alone",
        "ms",
        _le(5),
    ),
    Spec(
        "flood.attempt_ratio", "flood", f"{_FLOOD}: its creates a second / rate", "ratio", _ge(10)
    ),
    Spec(
        "flood.admitted_ratio",
        "flood",
        f"{_FLOOD}: let through / (rate x seconds + one burst)",
        "ratio",
        _le(1),
    ),
    Spec(
        "flood.quiet_refused",
        "flood",
        "the steady namespace's own creates refused during the flood",
        "creates",
        _NONE_EARLY,
    ),
    Spec("flood.early", "flood", "steady events early, both runs", "events", _NONE_EARLY),
    Spec("flood.missing", "flood", "steady events not received, both runs", "events", _NONE_EARLY),
)
# Issue 32: the dedup window's cost per fire, beside the same load without one.
_STEADY = "steady 1,000/s"
DEDUP_SPECS = (
    *(
        Spec(f"dedup.{run}.cpu_{who}_us", "dedup", f"{_STEADY}, {label}: {what} CPU per fire", "µs")
        for run, label in (("none", "no window"), ("windowed", "every task windowed"))
        for who, what in (("daemon", "daemon"), ("mariadb", "MariaDB"), ("both", "both"))
    ),
    *(
        Spec(f"dedup.cpu_{who}_added_us", "dedup", f"the window's {what} CPU per fire", "µs")
        for who, what in (
            ("daemon", "daemon"),
            ("mariadb", "MariaDB"),
            ("both", "daemon + MariaDB"),
        )
    ),
    Spec(
        "dedup.windowed.early", "dedup", f"{_STEADY} windowed: events early", "events", _NONE_EARLY
    ),
)
# Trigger Hook's own benchmark, run beside them (``--trigger-hook PATH``).
PEER_SPECS = tuple(
    Spec(key, "trigger_hook", f"Trigger Hook (Go) in this run: {label}", "tasks/s")
    for key, label in (
        ("trigger_hook.create", "creating, 8 goroutines, one task a call"),
        ("trigger_hook.delete", "deleting, 8 goroutines, one task a call"),
        ("trigger_hook.sending", "sending, overdue rows → in-process consumer"),
        ("trigger_hook.confirm", "confirmation, the sent rows deleted"),
    )
)

SPECS: tuple[Spec, ...] = (
    *PEER_SPECS,
    *_ENGINE_SPECS,
    *LISTING_SPECS,
    *SAME_SECOND_SPECS,
    *THROTTLE_SPECS,
    *FLOOD_SPECS,
    *DEDUP_SPECS,
)

_CPU_1K = "CPU per 1,000 fires"
STEP_SPECS = {
    "capacity": tuple(
        StepSpec(measure, f"capacity, {{step:,}} fires/s: {label}", unit, column)
        for measure, label, unit, column in (
            ("fired_p99", "lateness p99 (x-fired - x-due)", "ms", "fired p99"),
            ("early", "events early", "events", "early"),
            ("missing", "events not received", "events", "not received"),
            ("backlog_ms", "lateness growth, last quarter's median - first's", "ms", "growth"),
            ("cpu_daemon_per_1k_s", f"daemon {_CPU_1K}", "CPU-s", "daemon CPU per 1k"),
            ("cpu_mariadb_per_1k_s", f"MariaDB {_CPU_1K}", "CPU-s", "MariaDB CPU per 1k"),
            ("cpu_rabbitmq_per_1k_s", f"RabbitMQ {_CPU_1K}", "CPU-s", "RabbitMQ CPU per 1k"),
        )
    ),
    # Issue 16: a step a level of pending tasks (10,000 and 10,000,000), side by side.
    "pending": tuple(
        StepSpec(measure, f"{{step:,}} pending: {label}", unit, column)
        for measure, label, unit, column in (
            ("fired_p50", "steady 1,000/s lateness p50 (x-fired - x-due)", "ms", "fired p50"),
            ("fired_p99", "steady 1,000/s lateness p99", "ms", "fired p99"),
            ("early", "events early", "events", "early"),
            ("create_p50", "HTTP create, one at a time, p50", "ms", "create p50"),
            ("create_p99", "HTTP create p99", "ms", "create p99"),
            ("cancel_p50", "HTTP cancel of a pending task, one at a time, p50", "ms", "cancel p50"),
            ("cancel_p99", "HTTP cancel p99", "ms", "cancel p99"),
            ("arm_read_ms", "the arming reads alone, every shard (median)", "ms", "arm read"),
            ("any_due_ms", "the idle pass's due check, every shard (median)", "ms", "any-due"),
            ("probe_ms", "the skip probe between passes, every shard (median)", "ms", "probe"),
            (
                "rows_read_per_fire",
                "th_tasks rows read per fired task",
                "rows/task",
                "rows read/fire",
            ),
            ("cpu_mariadb_us", "MariaDB CPU per fired task", "µs", "MariaDB CPU/fire"),
            (
                "cpu_mariadb_net_us",
                "MariaDB CPU per fired task, less its background work without a daemon",
                "µs",
                "net of background",
            ),
            ("rss_mib", "the daemon's RSS", "MiB", "daemon RSS"),
            ("table_mib", "th_tasks rows (clustered index)", "MiB", "table"),
            ("index_mib", "th_tasks secondary indexes", "MiB", "indexes"),
        )
    ),
}

SCENARIOS = (
    "ceilings",
    "trigger_hook",
    "create",
    "delete",
    "sending",
    "burst",
    "near_due",
    "precision",
    "capacity",
    "hostile",
    "takeover",
    "listing",
    "pending",
    "same_second",
    "throttle",
    "flood",
    "instances",
    "dedup",
)
# What `python -m benchmarks` runs unless --only says: not instances, which
# needs the local cluster (scripts/cluster up --no-daemons), nor trigger_hook,
# which needs Trigger Hook's program (--trigger-hook PATH adds it).
# Nor dedup (the precision scenario's load twice more: --only dedup).
DEFAULT_SCENARIOS = tuple(s for s in SCENARIOS if s not in ("trigger_hook", "instances", "dedup"))


def format_number(value: float, unit: str) -> str:
    if unit == "rows/task":
        return f"{value:,.2f}"
    if unit == "ratio":
        return f"{value:,.3f}"
    if unit == "CPU-s":
        return f"{value:,.3f}"
    if unit in ("ms", "s", "MiB") and not float(value).is_integer():
        return f"{value:,.1f}"
    return f"{value:,.0f}"
