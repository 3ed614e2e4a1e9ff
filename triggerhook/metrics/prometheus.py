"""``GET /metrics``: the daemon's figures in the Prometheus exposition format.

:func:`build_registry` makes a registry of the HTTP API's own (never
prometheus_client's global one) holding a :class:`FiguresCollector`, which
reads the figures when Prometheus scrapes: nothing is kept or updated for
Prometheus between scrapes. Every family has HELP and TYPE, values are in base
units (seconds), counters end in ``_total``, and the engine's instance name is
the label ``triggerhook_instance`` (Prometheus gives every series the label
``instance``, its scrape target, itself). Beside them, prometheus_client's
collectors report the serving process (``process_*``), its garbage collector
(``python_gc_*``) and, when the engine runs in another process, that one's
``triggerhook_firing_process_*``. docs/metrics.md lists every family.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from prometheus_client.exposition import choose_encoder
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from triggerhook.metrics.collector import HTTP_LATENCY, LATENESS
from triggerhook.runtime import points
from triggerhook.runtime.counters import HistogramSnapshot
from triggerhook.runtime.points import Field

INSTANCE_LABEL = "triggerhook_instance"
STATUS_CLASS_LABEL = "status_class"
_PREFIX = "triggerhook_"
_MS_PER_S = 1000  # divided by, not multiplied: 2.5 ms is 0.0025 s exactly as written

# Totals since start -> HELP of ``triggerhook_<name>_total`` (docs/metrics.md).
# A total not listed here is still exposed, with a generic HELP.
COUNTERS: dict[str, str] = {
    "scheduled": "Tasks created through this instance.",
    "replaced": "Tasks replaced by a create with on_conflict replace through this instance.",
    "armed": "Tasks armed into memory (committed to fire).",
    "inherited": "Tasks armed by a shard's previous owner, taken over to fire again.",
    "shards_lost": "Shard leases found taken by another instance (fenced).",
    "fired": "Tasks handed to the publisher at their due time.",
    "throttled": "Tasks held back by a rate limit (rate_limits, catch_up_rate) until their token.",
    "postponed": "Throttled tasks whose rows were written back to wait for their token.",
    "published": "Events published to RabbitMQ.",
    "confirmed": "Events confirmed by the broker.",
    "deleted": "Task rows deleted after the broker's confirm.",
    "cancelled": "Tasks cancelled through this instance.",
    "rescheduled": "Tasks rescheduled through this instance.",
    "dedup_recorded": (
        "Fired records written (R5d) for tasks with a dedup window by this instance."
    ),
    "dedup_swept": "Expired fired records deleted by this instance's sweeps.",
    "dedup_refused": "Creates answered already_fired through this instance.",
    "outbox_moved": "Outbox rows moved into the task table by this instance (R6o).",
    "outbox_refused": (
        "Of those, tasks not written: the id exists with other content, is being "
        "published, or fired within its dedup window (logged)."
    ),
    "returned": "Events returned unroutable by the broker (retried, then dead-lettered).",
    "nacked": "Events nacked by the broker (retried, then dead-lettered).",
    "publish_retries": "Undelivered events stored back for another attempt after a back-off.",
    "dead_lettered": "Events published to the dead-letter routing key and confirmed.",
    "late_skipped": "Tasks not fired because their late-fire policy found them too late.",
    "commits_refused": "Write calls refused at once: their group commit's queue was full.",
    "commits_abandoned": "Write calls whose caller gave up while still queued (never written).",
    "db_errors": "Database errors met by the engine's threads (each retried).",
    "broker_reconnects": "Reconnections to RabbitMQ.",
    "http_connections_refused": "HTTP connections closed at once, over http_max_connections.",
    "http_header_timeouts": "HTTP connections closed: request head slower than the timeout.",
    "http_body_timeouts": "HTTP requests answered 408: body slower than the timeout.",
    "quota_refused": (
        "Creates refused over_quota: over a namespace's create_rate or max_pending "
        "(the log names the namespace)."
    ),
    "namespaces_reload_failures": (
        "Changes of namespaces_file that did not load (the last good one stays; logged)."
    ),
}
# Totals ``requests_2xx`` ... ``requests_5xx``: one family, the class a label.
_REQUESTS = "requests_"
REQUESTS_FAMILY = "triggerhook_http_requests"
_REQUESTS_HELP = "HTTP requests answered, by status class (1xx counts as 2xx)."

# The last period's figures -> (family, HELP, divisor to base units).
GAUGES: dict[str, tuple[str, str, int]] = {
    "tasks_db": (
        "triggerhook_tasks_in_database",
        "Tasks in the database: an exact count every metrics_recount_s, "
        "plus this instance's own inserts and deletes in between.",
        1,
    ),
    "in_memory": ("triggerhook_tasks_in_memory", "Tasks this instance holds in memory.", 1),
    "heap": ("triggerhook_heap_tasks", "Armed tasks waiting for their due time.", 1),
    "send_buffer": ("triggerhook_send_buffer_tasks", "Fired tasks waiting to be published.", 1),
    "unconfirmed": (
        "triggerhook_unconfirmed_events",
        "Events published, awaiting the broker's confirm.",
        1,
    ),
    "shards": ("triggerhook_shards_owned", "Shard leases this instance holds.", 1),
    "members": ("triggerhook_members", "Live instances on the database, as last counted.", 1),
    "oldest_overdue_ms": (
        "triggerhook_oldest_overdue_seconds",
        "How long the earliest-due task in the database is past due (0: none is).",
        _MS_PER_S,
    ),
    "outbox_waiting": (
        "triggerhook_outbox_waiting_tasks",
        "Tasks scheduled inside callers' transactions (committed) not moved yet.",
        1,
    ),
    "outbox_lag_ms": (
        "triggerhook_outbox_lag_seconds",
        "How long the first task waiting in the outbox has waited (0: none waits).",
        _MS_PER_S,
    ),
    "clock_uncertainty_ms": (
        "triggerhook_clock_uncertainty_seconds",
        "How well the engine knows the database's clock, by which it fires.",
        _MS_PER_S,
    ),
    "clock_offset_ms": (
        "triggerhook_clock_offset_seconds",
        "The host's clock minus the database's (positive: the host is ahead).",
        _MS_PER_S,
    ),
    "galera_conflicts": (
        "triggerhook_galera_conflicts",
        "Certification conflicts the Galera node this instance writes to counted since it "
        "started (absent: no Galera); growing: writes reach more than one node.",
        1,
    ),
}
RUNNING_FAMILY = "triggerhook_running"

# Figures per rate-limit bucket (``name:pattern`` fields, runtime.points.labelled)
# -> (family, HELP, divisor to base units), the pattern a label
# ("(catch_up)": the catch_up_rate bucket).
PATTERN_LABEL = "pattern"
BY_PATTERN_COUNTERS: dict[str, tuple[str, str, int]] = {
    "throttled": (
        "triggerhook_throttled_by_pattern",
        "Tasks a rate limit held back until their token, by the limit's pattern.",
        1,
    ),
    "throttle_wait_ms": (
        "triggerhook_throttle_wait_seconds",
        "Wait a rate limit added to the tasks it held, summed, by the limit's pattern.",
        _MS_PER_S,
    ),
}
# Totals per webhook target (``name:target`` fields: triggerhook.webhook.bridge).
WEBHOOK_LABEL = "webhook"
BY_WEBHOOK_COUNTERS: dict[str, tuple[str, str, int]] = {
    "webhook_delivered": (
        "triggerhook_webhook_delivered",
        "Events a webhook target answered 2xx, by target.",
        1,
    ),
    "webhook_retried": (
        "triggerhook_webhook_retried",
        "Failed webhook attempts tried again after a back-off, by target.",
        1,
    ),
    "webhook_dead_lettered": (
        "triggerhook_webhook_dead_lettered",
        "Events dead-lettered because a webhook target did not take them, by target.",
        1,
    ),
    "webhook_refused_host": (
        "triggerhook_webhook_refused_host",
        "Of those, the events whose target resolved to an address not allowed, by target.",
        1,
    ),
}
BY_PATTERN_GAUGES: dict[str, tuple[str, str, int]] = {
    "throttle_holding": (
        "triggerhook_throttle_holding_tasks",
        "Tasks a rate limit holds back now (in memory or in the database), by its pattern.",
        1,
    ),
}

# Histograms since start (see triggerhook.metrics.collector) -> (family, HELP).
HISTOGRAMS: dict[str, tuple[str, str]] = {
    LATENESS: (
        "triggerhook_fire_lateness_seconds",
        "Publish time minus due time of each event published (the database's clock).",
    ),
    HTTP_LATENCY: (
        "triggerhook_http_request_duration_seconds",
        "Time the HTTP API took to handle each request.",
    ),
}

FIRING_NAMESPACE = "triggerhook_firing"


class FigureSource(Protocol):
    """What the collector reads (:class:`triggerhook.app.Figures`)."""

    @property
    def instance(self) -> str: ...

    @property
    def running(self) -> bool: ...

    @property
    def totals(self) -> Mapping[str, int]: ...

    @property
    def latest(self) -> Mapping[str, Mapping[str, Field]]: ...

    @property
    def histograms(self) -> Mapping[str, HistogramSnapshot]: ...


class FiguresCollector(Collector):
    """The engine's and the HTTP API's figures, read at each scrape."""

    def __init__(self, figures: Callable[[], FigureSource]) -> None:
        self._figures = figures

    def collect(self) -> Iterator[Metric]:
        figures = self._figures()
        instance = [figures.instance]
        running = GaugeMetricFamily(
            RUNNING_FAMILY, "1 while the engine runs, else 0.", labels=[INSTANCE_LABEL]
        )
        running.add_metric(instance, 1 if figures.running else 0)
        yield running
        yield from _counters(figures.totals, instance)
        yield from _by_pattern(figures.totals, BY_PATTERN_COUNTERS, instance, CounterMetricFamily)
        yield from _by_pattern(
            figures.totals, BY_WEBHOOK_COUNTERS, instance, CounterMetricFamily, WEBHOOK_LABEL
        )
        period = figures.latest.get(points.ENGINE, {})
        yield from _gauges(period, instance)
        yield from _by_pattern(period, BY_PATTERN_GAUGES, instance, GaugeMetricFamily)
        yield from _histograms(figures.histograms, instance)


def _counters(totals: Mapping[str, int], instance: list[str]) -> Iterator[Metric]:
    requests = CounterMetricFamily(
        REQUESTS_FAMILY, _REQUESTS_HELP, labels=[INSTANCE_LABEL, STATUS_CLASS_LABEL]
    )
    for name, value in sorted(totals.items()):
        if points.split_label(name)[1] is not None:  # _by_pattern's
            continue
        if name.startswith(_REQUESTS):
            requests.add_metric([*instance, name.removeprefix(_REQUESTS)], value)
            continue
        help_text = COUNTERS.get(name, f"The engine's {name} total (docs/metrics.md).")
        family = CounterMetricFamily(_PREFIX + name, help_text, labels=[INSTANCE_LABEL])
        family.add_metric(instance, value)
        yield family
    if requests.samples:
        yield requests


def _gauges(period: Mapping[str, Field], instance: list[str]) -> Iterator[Metric]:
    for field, (name, help_text, divisor) in GAUGES.items():
        if field in period:  # absent: not measured (e.g. the database was down)
            family = GaugeMetricFamily(name, help_text, labels=[INSTANCE_LABEL])
            family.add_metric(instance, period[field] / divisor)
            yield family


def _by_pattern(
    figures: Mapping[str, Field],
    families: Mapping[str, tuple[str, str, int]],
    instance: list[str],
    kind: type[CounterMetricFamily] | type[GaugeMetricFamily],
    label_name: str = PATTERN_LABEL,
) -> Iterator[Metric]:
    """The labelled figures of ``families``, a family each, a sample per
    label value (a pattern, or a webhook target's name)."""
    found: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
    for field, value in sorted(figures.items()):
        name, label = points.split_label(field)
        if label is None or name not in families:
            continue
        family_name, help_text, divisor = families[name]
        family = found.get(name)
        if family is None:
            family = found[name] = kind(family_name, help_text, labels=[INSTANCE_LABEL, label_name])
        family.add_metric([*instance, label], value / divisor)
    yield from found.values()


def _histograms(
    histograms: Mapping[str, HistogramSnapshot], instance: list[str]
) -> Iterator[Metric]:
    for key, (name, help_text) in HISTOGRAMS.items():
        snapshot = histograms.get(key)
        if snapshot is None:  # not observed here (no HTTP API), or before the first period
            continue
        bounds = [repr(bound_ms / _MS_PER_S) for bound_ms in snapshot.bounds_ms]
        buckets = list(zip([*bounds, "+Inf"], snapshot.cumulative, strict=True))
        family = HistogramMetricFamily(name, help_text, labels=[INSTANCE_LABEL])
        family.add_metric(instance, buckets, snapshot.sum_ms / _MS_PER_S)
        yield family


def build_registry(
    figures: Callable[[], FigureSource], firing_pid: int | None = None
) -> CollectorRegistry:
    """A registry of the figures, this process's metrics and, with
    ``firing_pid`` (the engine runs in that process), the firing process's."""
    registry = CollectorRegistry()
    registry.register(FiguresCollector(figures))
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    if firing_pid is not None:
        ProcessCollector(FIRING_NAMESPACE, pid=lambda: firing_pid, registry=registry)
    return registry


def exposition(registry: CollectorRegistry, accept: str) -> tuple[bytes, str]:
    """The registry's metrics and their content type, in the format the
    ``Accept`` header asks for (OpenMetrics, or else the text format 0.0.4)."""
    encode, content_type = choose_encoder(accept)
    return encode(registry), content_type
