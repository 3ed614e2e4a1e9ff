"""``GET /metrics``'s exposition (triggerhook.metrics.prometheus) and the
histograms behind it (runtime.counters.Histogram, fed by the metrics collector).

The exposition is parsed with prometheus_client's own parsers, as Prometheus
would read it: HELP and TYPE for every family, counters named ``_total``,
histograms cumulative and in seconds, the instance under a label that is not
Prometheus's ``instance``; docs/metrics.md names every family.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from support.fakes import FakeStore

from triggerhook.app import Figures
from triggerhook.interfaces import EngineStats
from triggerhook.metrics import prometheus
from triggerhook.metrics.collector import (
    HTTP_LATENCY,
    HTTP_LATENCY_BOUNDS_MS,
    LATENESS,
    LATENESS_BOUNDS_MS,
    Collector,
)
from triggerhook.runtime import points
from triggerhook.runtime.counters import Histogram, RequestStats

REPO = Path(__file__).resolve().parents[2]
NOW_MS = 1_700_000_000_000
INSTANCE = 'node-1 "a"'  # quotes: the label value is escaped
LATENESS_MS = [0, 1, 1, 3, 40, 1500, 20_000]  # 20 s: above every bound
LATENCY_MS = [0.2, 0.5, 7.0, 7.0]


TOTALS = {
    "scheduled": 12, "fired": 7, "published": 7, "db_errors": 0,
    "requests_2xx": 30, "requests_3xx": 0, "requests_4xx": 2, "requests_5xx": 0,
    "http_connections_refused": 1,
    "throttled": 9, "throttled:billing.*": 7, "throttled:(catch_up)": 2,
    "throttle_wait_ms:billing.*": 1500, "throttle_wait_ms:(catch_up)": 250,
    "webhook_delivered:billing": 5, "webhook_retried:billing": 2,
    "webhook_dead_lettered:billing": 1, "webhook_refused_host:billing": 0,
}  # fmt: skip
ENGINE_PERIOD: dict[str, int | float] = {
    "period_ms": 1000, "fired": 2, "heap": 3, "tasks_db": 40, "oldest_overdue_ms": 2500,
    "clock_uncertainty_ms": 0.25, "lateness_p99_ms": 40.0,
    "throttle_holding:billing.*": 4, "throttle_holding:(catch_up)": 0,
}  # fmt: skip


def figures() -> Figures:
    lateness = Histogram(LATENESS_BOUNDS_MS)
    lateness.observe_all(LATENESS_MS)
    latency = Histogram(HTTP_LATENCY_BOUNDS_MS)
    latency.observe_all(LATENCY_MS)
    return Figures(
        instance=INSTANCE,
        running=True,
        totals=dict(TOTALS),
        latest={
            points.ENGINE: dict(ENGINE_PERIOD),
            points.HTTP: {"period_ms": 1000, "requests_2xx": 3, "latency_p99_ms": 7.0},
        },
        histograms={LATENESS: lateness.snapshot(), HTTP_LATENCY: latency.snapshot()},
    )


def scrape(accept: str = "", firing_pid: int | None = None) -> tuple[str, str]:
    registry = prometheus.build_registry(figures, firing_pid)
    body, content_type = prometheus.exposition(registry, accept)
    return body.decode(), content_type


def samples(text: str) -> dict[str, list[Sample]]:
    """family name -> its samples, as Prometheus's text parser reads them."""
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(text: str, name: str, **labels: str) -> float:
    found = [
        s.value
        for family in samples(text).values()
        for s in family
        if s.name == name and labels.items() <= s.labels.items()
    ]
    assert len(found) == 1, f"{name}{labels}: {found}"
    return found[0]


def test_the_exposition_parses_and_every_family_has_help_and_type() -> None:
    text, content_type = scrape()
    assert content_type.startswith("text/plain; version=0.0.4")
    families = list(text_string_to_metric_families(text))
    helped = dict(re.findall(r"^# HELP (\S+) (.+)$", text, re.MULTILINE))
    typed = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    assert set(helped) == set(typed), set(helped) ^ set(typed)
    for family in families:
        # The text format names a counter's family with _total; the parser strips it.
        name = family.name + ("_total" if family.type == "counter" else "")
        assert helped.get(name, "").strip(), f"{name}: no HELP"
        assert typed[name] == family.type, name
        assert family.samples, f"{name}: no sample"
    names = {family.name for family in families}
    assert {"triggerhook_fired", "triggerhook_fire_lateness_seconds"} <= names
    assert {"process_cpu_seconds", "process_resident_memory_bytes"} <= names
    assert "python_gc_objects_collected" in names


def test_counters_end_in_total_and_gauges_do_not() -> None:
    text, _ = scrape()
    typed = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    for name, kind in typed.items():
        assert name.endswith("_total") == (kind == "counter"), (name, kind)
    assert value(text, "triggerhook_scheduled_total") == 12
    assert value(text, "triggerhook_http_connections_refused_total") == 1
    requests = "triggerhook_http_requests_total"
    assert value(text, requests, status_class="2xx") == 30
    assert value(text, requests, status_class="4xx") == 2
    # Per-period counts are not exposed: Prometheus takes rates of the totals.
    assert "triggerhook_period" not in text and "triggerhook_fired " not in text


def test_rate_limits_are_figured_per_pattern_as_a_label() -> None:
    text, _ = scrape()
    assert value(text, "triggerhook_throttled_total") == 9  # all of them, unlabelled
    held = "triggerhook_throttled_by_pattern_total"
    assert value(text, held, pattern="billing.*") == 7
    assert value(text, held, pattern="(catch_up)") == 2
    wait = "triggerhook_throttle_wait_seconds_total"
    assert value(text, wait, pattern="billing.*") == 1.5
    assert value(text, wait, pattern="(catch_up)") == 0.25
    holding = "triggerhook_throttle_holding_tasks"
    assert value(text, holding, pattern="billing.*") == 4
    assert value(text, holding, pattern="(catch_up)") == 0
    assert "throttled:" not in text and "throttle_holding:" not in text


def test_webhook_targets_are_figured_per_target_as_a_label() -> None:
    text, _ = scrape()
    assert value(text, "triggerhook_webhook_delivered_total", webhook="billing") == 5
    assert value(text, "triggerhook_webhook_retried_total", webhook="billing") == 2
    assert value(text, "triggerhook_webhook_dead_lettered_total", webhook="billing") == 1
    assert value(text, "triggerhook_webhook_refused_host_total", webhook="billing") == 0
    assert "webhook_delivered:" not in text


def test_the_instance_is_a_label_of_its_own_never_instance() -> None:
    text, _ = scrape()
    ours = [s for f in samples(text).values() for s in f if s.name.startswith("triggerhook_")]
    assert ours
    for sample in ours:
        assert "instance" not in sample.labels, sample
        assert sample.labels[prometheus.INSTANCE_LABEL] == INSTANCE, sample
    assert "triggerhook_instance=" in text


def test_figures_are_in_seconds_not_milliseconds() -> None:
    text, _ = scrape()
    assert value(text, "triggerhook_oldest_overdue_seconds") == 2.5
    assert value(text, "triggerhook_clock_uncertainty_seconds") == 0.00025
    assert value(text, "triggerhook_heap_tasks") == 3
    assert value(text, "triggerhook_tasks_in_database") == 40
    assert value(text, "triggerhook_running") == 1
    assert value(text, "triggerhook_fire_lateness_seconds_sum") == pytest.approx(
        sum(LATENESS_MS) / 1000
    )
    assert value(text, "triggerhook_http_request_duration_seconds_sum") == pytest.approx(
        sum(LATENCY_MS) / 1000
    )
    # The per-period percentiles (InfluxDB's) are not gauges here.
    assert "_ms" not in "".join(re.findall(r"^(\w+)", text, re.MULTILINE))
    assert "p99" not in text


def _buckets(text: str, family: str) -> list[tuple[float, float]]:
    found = [
        (float(s.labels["le"]), s.value)
        for s in samples(text)[family]
        if s.name == f"{family}_bucket"
    ]
    return found


@pytest.mark.parametrize(
    ("family", "values_ms", "first_s", "last_s"),
    [
        ("triggerhook_fire_lateness_seconds", LATENESS_MS, 0.001, 10.0),
        ("triggerhook_http_request_duration_seconds", LATENCY_MS, 0.0005, 5.0),
    ],
)
def test_histograms_are_cumulative_with_sensible_buckets(
    family: str, values_ms: list[float], first_s: float, last_s: float
) -> None:
    text, _ = scrape()
    buckets = _buckets(text, family)
    bounds = [le for le, _ in buckets]
    counts = [count for _, count in buckets]
    assert bounds == sorted(bounds) and bounds[-1] == float("inf")
    assert (bounds[0], bounds[-2]) == (first_s, last_s)
    assert counts == sorted(counts), f"not cumulative: {buckets}"
    assert counts[-1] == value(text, f"{family}_count") == len(values_ms)
    for le, count in buckets:  # each bucket: the values at most its bound (inclusive)
        assert count == sum(1 for v in values_ms if v / 1000 <= le), (le, buckets)


def test_openmetrics_is_served_to_who_asks_for_it() -> None:
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    text, content_type = scrape(accept)
    assert content_type.startswith("application/openmetrics-text")
    assert text.endswith("# EOF\n")
    parsed = openmetrics_families(text)  # type: ignore[no-untyped-call]  # untyped upstream
    names = {family.name for family in parsed}
    assert {"triggerhook_fired", "triggerhook_fire_lateness_seconds"} <= names


def test_the_firing_process_is_reported_when_the_engine_runs_elsewhere() -> None:
    alone, _ = scrape()
    assert "triggerhook_firing_process" not in alone
    text, _ = scrape(firing_pid=os.getpid())  # any live process of ours will do
    resident = value(text, "triggerhook_firing_process_resident_memory_bytes")
    assert resident == value(text, "process_resident_memory_bytes") > 0


def test_registries_are_separate() -> None:
    """No global state: two registries (two HTTP APIs, or tests) never clash."""
    first = prometheus.build_registry(figures)
    second = prometheus.build_registry(figures)
    assert prometheus.exposition(first, "")[0].count(b"# TYPE triggerhook_fired_total") == 1
    assert prometheus.exposition(second, "")[0].count(b"# TYPE triggerhook_fired_total") == 1


# -- the histograms behind it -------------------------------------------------------------


def test_histogram_counts_each_value_in_the_first_bucket_that_holds_it() -> None:
    histogram = Histogram([10, 1, 5])  # any order
    histogram.observe_all([0, 1, 1.5, 5, 10, 11])
    snapshot = histogram.snapshot()
    assert list(snapshot.bounds_ms) == [1, 5, 10]
    assert list(snapshot.cumulative) == [2, 4, 5, 6]  # le 1: 0 and 1; le 5: +1.5, 5; ...
    assert snapshot.count == 6 and snapshot.sum_ms == 28.5
    histogram.observe_all([])
    assert histogram.snapshot() == snapshot


class _Engine:
    def __init__(self) -> None:
        self.lateness: list[float] = []

    def counters(self) -> Mapping[str, int]:
        return {"scheduled": 0, "fired": 0, "deleted": 0, "cancelled": 0}

    def stats(self) -> EngineStats:
        return EngineStats(
            in_memory=0, shards=0, armed=0, send_buffer=0, unconfirmed=0, members=1, fired=0,
            deleted=0,
        )  # fmt: skip

    def take_lateness(self) -> list[float]:
        taken, self.lateness = self.lateness, []
        return taken


def test_the_collector_keeps_totals_since_start_and_the_periods_percentiles() -> None:
    engine = _Engine()
    collector = Collector(engine, FakeStore(), {"instance": "i"}, 60_000, NOW_MS)
    collector.http = RequestStats()
    engine.lateness = [3.0, 700.0]
    collector.http.record(200, 4.0)
    collector.collect(NOW_MS + 1000)
    engine.lateness = [1.0]
    (engine_point, http_point) = collector.collect(NOW_MS + 2000)

    # InfluxDB's fields: this period only, as before.
    assert (engine_point.fields["lateness_p50_ms"], engine_point.fields["lateness_max_ms"]) == (
        1.0,
        1.0,
    )
    assert "latency_p50_ms" not in http_point.fields  # no request in the second period
    # Prometheus's histograms: everything since start.
    lateness = collector.histograms[LATENESS]
    assert (lateness.count, lateness.sum_ms) == (3, 704.0)
    assert lateness.cumulative[0] == 1  # 1 ms: le 1 ms
    latency = collector.histograms[HTTP_LATENCY]
    assert (latency.count, latency.sum_ms) == (1, 4.0)


# -- docs/metrics.md names them all ----------------------------------------------------------


def _documented_engine_fields() -> set[str]:
    text = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    section = text.split("## `triggerhook` (the engine)", 1)[1].split("\n## ", 1)[0]
    return {
        name
        for line in section.splitlines()
        if line.startswith("| `")
        for name in re.findall(r"`(\w+)`", line.split("|")[1])
    }


def test_every_engine_figure_is_exposed_or_deliberately_left_out() -> None:
    left_out = {"period_ms", "metrics_dropped", "lateness_p50_ms", "lateness_p99_ms"}
    left_out |= {"lateness_max_ms"}  # the histogram replaces the period's percentiles
    exposed = set(prometheus.COUNTERS) | set(prometheus.GAUGES)
    documented = _documented_engine_fields()
    assert documented, "docs/metrics.md: no engine table found"
    assert documented - left_out <= exposed, sorted(documented - left_out - exposed)


def test_docs_name_every_prometheus_family() -> None:
    docs = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    families = [f"triggerhook_{name}_total" for name in prometheus.COUNTERS]
    families += [name for name, _, _ in prometheus.GAUGES.values()]
    families += [name for name, _ in prometheus.HISTOGRAMS.values()]
    families += [f"{prometheus.REQUESTS_FAMILY}_total", prometheus.RUNNING_FAMILY]
    families += [f"{name}_total" for name, _, _ in prometheus.BY_PATTERN_COUNTERS.values()]
    families += [name for name, _, _ in prometheus.BY_PATTERN_GAUGES.values()]
    families += [f"{name}_total" for name, _, _ in prometheus.BY_WEBHOOK_COUNTERS.values()]
    families += [prometheus.PATTERN_LABEL, prometheus.WEBHOOK_LABEL]
    families += [prometheus.INSTANCE_LABEL, prometheus.STATUS_CLASS_LABEL, "metrics_scrape_token"]
    missing = [name for name in families if f"`{name}`" not in docs]
    assert not missing, f"not in docs/metrics.md: {missing}"
