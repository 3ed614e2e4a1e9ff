"""The Prometheus dashboard and alert rules (grafana/): their files, and every
panel's and rule's PromQL query returning data from a real Prometheus that
scrapes a real daemon.

Grafana cannot run here: the structural tests read the files the way Grafana's
provisioning does; the data test starts Debian's ``prometheus`` (scraping the
daemon's ``/metrics`` every second), substitutes Grafana's macros
(support/prometheus.py) and runs every query through Prometheus's HTTP API.
The families the queries name are checked against docs/metrics.md.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from typing import Any

from support import grafana
from support.amqp import AmqpNames, EventConsumer
from support.daemon import DaemonGroup, daemon_env
from support.names import unique_name
from support.prometheus import (
    ALL,
    SCRAPE_INTERVAL_S,
    PrometheusServer,
    Series,
    regex_value,
    render_promql,
)
from support.waiting import wait_for

DATASOURCE_UID = "triggerhook-prometheus"
DATASOURCE = {"type": "prometheus", "uid": DATASOURCE_UID}
DATASOURCES = grafana.GRAFANA / "provisioning" / "datasources" / "prometheus.yaml"
DASHBOARD = grafana.GRAFANA / "dashboards" / "triggerhook-prometheus.json"
ALERTING = grafana.GRAFANA / "provisioning" / "alerting" / "triggerhook-prometheus.yaml"
INSTANCE_FILTER = 'triggerhook_instance=~"$instance"'
VARIABLE_QUERY = "label_values(triggerhook_running, triggerhook_instance)"
DASHBOARD_WINDOWS = {"$__rate_interval", "$__range"}
# The figures the dashboard must show (its Prometheus families).
REQUIRED = {
    "triggerhook_fired_total", "triggerhook_scheduled_total", "triggerhook_confirmed_total",
    "triggerhook_fire_lateness_seconds_bucket", "triggerhook_oldest_overdue_seconds",
    "triggerhook_tasks_in_database", "triggerhook_heap_tasks", "triggerhook_send_buffer_tasks",
    "triggerhook_unconfirmed_events", "triggerhook_tasks_in_memory",
    "triggerhook_shards_owned", "triggerhook_members", "triggerhook_db_errors_total",
    "triggerhook_broker_reconnects_total", "triggerhook_returned_total",
    "triggerhook_nacked_total", "triggerhook_http_requests_total",
    "triggerhook_http_request_duration_seconds_bucket", "process_cpu_seconds_total",
    "process_resident_memory_bytes",
}  # fmt: skip
DATASOURCE_KEYS = {
    "name", "type", "access", "orgId", "uid", "url", "user", "database", "basicAuth",
    "basicAuthUser", "withCredentials", "isDefault", "jsonData", "secureJsonData", "version",
    "editable",
}  # fmt: skip
DURATION = re.compile(r"^(\d+[smhd])+$")
# Metric names in PromQL: our families, the process collectors' and the GC's.
_FAMILY = re.compile(r"\b((?:triggerhook|process|python_gc)_\w+)")
_LABELS = {"triggerhook_instance"}

INTERVAL_S = 2  # $__interval of the data test's range queries (their step too)


def load_dashboard() -> dict[str, Any]:
    return grafana.load_dashboard(DASHBOARD)


def exprs(dashboard: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(panel title, refId, PromQL) of every panel query."""
    return [
        (str(panel["title"]), str(t["refId"]), str(t["expr"]))
        for panel in grafana.panels(dashboard)
        for t in panel.get("targets", [])
        if not t.get("hide")
    ]


def alert_nodes(alerting: Mapping[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(rule, node) of every data-source query of every rule."""
    return [
        (rule, node)
        for rule in grafana.rules(alerting)
        for node in rule["data"]
        if node["datasourceUid"] != grafana.EXPRESSION_UID
    ]


def documented_families() -> set[str]:
    text = (grafana.REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    section = text.split("## Prometheus: `GET /metrics`", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`(\w+)`", section))


def families(expr: str) -> set[str]:
    return {name for name in _FAMILY.findall(expr) if name not in _LABELS}


def _documented(name: str, documented: set[str]) -> bool:
    name = re.sub(r"_(bucket|sum|count)$", "", name)
    # triggerhook_firing_process_*: the same families as process_*, of the firing process.
    return name in documented or name.replace("triggerhook_firing_", "") in documented


# -- provisioning ------------------------------------------------------------------------


def test_datasource_is_provisioned_from_the_environment() -> None:
    config = grafana.load_yaml(DATASOURCES)
    assert config["apiVersion"] == 1
    (source,) = config["datasources"]
    grafana.only_known_keys(source, DATASOURCE_KEYS, "data source")
    assert source["uid"] == DATASOURCE_UID and source["type"] == "prometheus"
    assert source["access"] == "proxy" and source["url"] == "${PROMETHEUS_URL}"
    assert DURATION.match(source["jsonData"]["timeInterval"])
    docs = (grafana.REPO / "docs" / "grafana.md").read_text(encoding="utf-8")
    assert "PROMETHEUS_URL=" in docs, "docs/grafana.md does not show how to set PROMETHEUS_URL"
    for path in (DATASOURCES, DASHBOARD, ALERTING):
        assert str(path.relative_to(grafana.REPO)) in docs, path


def test_dashboard_panels_query_the_provisioned_source_in_promql() -> None:
    dashboard = load_dashboard()
    assert dashboard["uid"] == "triggerhook-prometheus" and dashboard["title"]
    assert dashboard["uid"] != grafana.load_dashboard()["uid"]  # both load into one folder
    shown = [p for p in grafana.panels(dashboard) if p["type"] != "row"]
    assert shown, "the dashboard has no panels"
    ids = [p["id"] for p in grafana.panels(dashboard)]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {ids}"
    for panel in shown:
        where = f"panel {panel['id']} {panel['title']!r}"
        assert panel["datasource"] == DATASOURCE, where
        assert panel.get("description"), f"{where}: say what it shows"
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, where
        assert panel["targets"], f"{where} has no query"
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), where
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, where
            expr = target["expr"]
            assert INSTANCE_FILTER in expr, f"{where}: {expr}"
            windows = set(re.findall(r"\[([^\]]+)\]", expr))
            assert windows <= DASHBOARD_WINDOWS, f"{where}: fixed windows {windows}"


def test_dashboard_has_the_instance_variable() -> None:
    variables = load_dashboard()["templating"]["list"]
    (variable,) = (v for v in variables if v["name"] == "instance")
    assert variable["type"] == "query" and variable["datasource"] == DATASOURCE
    assert variable["definition"] == variable["query"]["query"] == VARIABLE_QUERY
    assert variable["multi"] is True and variable["includeAll"] is True
    assert variable["allValue"] == ".*"


def test_dashboard_shows_every_required_family_by_its_documented_name() -> None:
    documented = documented_families()
    used: set[str] = set()
    for title, _ref, expr in exprs(load_dashboard()):
        unknown = {name for name in families(expr) if not _documented(name, documented)}
        assert not unknown, f"{title!r} uses undocumented {sorted(unknown)}"
        used |= families(expr)
    assert used >= REQUIRED, f"not on the dashboard: {sorted(REQUIRED - used)}"


def _condition(rule: Mapping[str, Any]) -> dict[str, Any]:
    (node,) = (n for n in rule["data"] if n["refId"] == rule["condition"])
    model: dict[str, Any] = node["model"]
    return model


def test_alert_rules_are_in_grafanas_provisioning_format() -> None:
    config = grafana.load_yaml(ALERTING)
    assert config["apiVersion"] == 1
    dashboard = load_dashboard()
    panel_ids = {p["id"] for p in grafana.panels(dashboard)}
    influx = grafana.load_yaml(grafana.ALERTING)
    taken = {(g["folder"], g["name"]) for g in influx["groups"]}
    taken_uids = {rule["uid"] for rule in grafana.rules(influx)}
    uids: list[str] = []
    for group in config["groups"]:
        grafana.only_known_keys(group, grafana.ALERT_GROUP_KEYS, "rule group")
        assert (group["folder"], group["name"]) not in taken, "one group name per folder"
        assert group["orgId"] == 1 and DURATION.match(group["interval"])
        for rule in group["rules"]:
            grafana.only_known_keys(rule, grafana.ALERT_RULE_KEYS, f"rule {rule['uid']}")
            uids.append(rule["uid"])
            assert rule["title"] and DURATION.match(rule["for"]), rule["uid"]
            assert rule["labels"]["service"] == "triggerhook", rule["uid"]
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]
            assert not any("$" in text for text in rule["annotations"].values()), rule["uid"]
            assert rule["dashboardUid"] == dashboard["uid"] and rule["panelId"] in panel_ids
            ref_ids = {node["refId"] for node in rule["data"]}
            assert rule["condition"] in ref_ids and len(ref_ids) == len(rule["data"])
            for node in rule["data"]:
                where = f"rule {rule['uid']} {node['refId']}"
                grafana.only_known_keys(node, grafana.ALERT_NODE_KEYS, where)
                model = node["model"]
                assert model["refId"] == node["refId"]
                if node["datasourceUid"] == grafana.EXPRESSION_UID:
                    assert model["type"] in grafana.EXPRESSION_TYPES
                    continue
                assert node["datasourceUid"] == DATASOURCE_UID and model["datasource"] == DATASOURCE
                assert model["instant"] is True and model["expr"], rule["uid"]
                assert "$" not in model["expr"], "alert queries have no dashboard variables"
                assert node["relativeTimeRange"]["from"] > 0
    assert len(uids) == len(set(uids)) and not set(uids) & taken_uids, uids
    documented = documented_families()
    for rule, node in alert_nodes(config):
        names = families(node["model"]["expr"])
        assert names and all(_documented(n, documented) for n in names), rule["uid"]

    rules = {rule["uid"]: rule for rule in grafana.rules(config)}
    overdue = rules["triggerhook-prom-oldest-overdue"]
    assert _condition(overdue)["conditions"][0]["evaluator"] == {"type": "gt", "params": [5]}
    assert overdue["for"] == "1m"
    silence = rules["triggerhook-prom-no-metrics"]
    assert silence["noDataState"] == "Alerting"  # no series at all must alert
    assert _condition(silence)["conditions"][0]["evaluator"] == {"type": "lt", "params": [1]}


# -- every query returns data from a real Prometheus scraping a real daemon ----------------


def _problems(series: list[Series]) -> list[str]:
    """Why a query's answer would leave its panel (or a line of it) empty."""
    if not series:
        return ["no series"]
    return [f"only NaN: {s.labels}" for s in series if not s.has_number()]


def test_every_panel_and_alert_query_returns_data_from_prometheus(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_queue: EventConsumer,
    daemons: DaemonGroup,
) -> None:
    instance = unique_name("prom-")
    env = daemon_env(
        database_url,
        amqp_url,
        amqp_names.exchange,
        instance,
        metrics_interval_ms=200,
        metrics_recount_s=1,
        publish_retry_max_ms=300,
    )
    daemon = daemons.start(env, "prom-grafana", "--init-db")
    daemon.wait_ready()
    target = f"127.0.0.1:{env['TRIGGERHOOK_HTTP_PORT']}"
    with PrometheusServer([target]) as prom:
        started_s = time.time()
        wait_for(prom.targets_up, 20, lambda: f"target not up\n{prom.log()}")
        grafana.drive_the_daemon(daemon.http_url, event_queue, "prom")

        mine = f'{{triggerhook_instance="{instance}"}}'
        wait_for(lambda: prom.value(f"triggerhook_confirmed_total{mine}") >= 30, 20)
        wait_for(lambda: prom.value(f"triggerhook_returned_total{mine}") >= 2, 20)
        wait_for(lambda: prom.value(f"triggerhook_cancelled_total{mine}") >= 1, 20)
        wait_for(lambda: prom.value(f"triggerhook_fire_lateness_seconds_count{mine}") >= 30, 20)
        # Enough samples after the run for every rate window to hold some.
        settled_s = time.time() + 4 * SCRAPE_INTERVAL_S
        wait_for(lambda: time.time() > settled_s and prom.targets_up(), 20)

        failures = _query_everything(prom, instance, started_s)

        overdue = _worst(prom, "triggerhook-prom-oldest-overdue", started_s)
        failing = _worst(prom, "triggerhook-prom-publish-failures", started_s, instance)
        silence = alert_expr("triggerhook-prom-no-metrics")
        assert prom.value(silence) >= 1
        assert daemon.terminate() == 0
        # The daemon gone: a window after its last sample holds no series at
        # all (Grafana's "no data", which the rule maps to alerting).
        wait_for(lambda: not prom.targets_up(), 20, "the scrape never failed")
        assert prom.query(silence, at_s=time.time() + 121) == []
    assert not failures, "\n".join(failures)
    assert overdue > 0.2, "the unroutable task was never seen overdue"
    assert failing > 0, "the unroutable task's retries were never counted"


def alert_expr(rule_uid: str) -> str:
    alerting = grafana.load_yaml(ALERTING)
    (expr,) = [n["model"]["expr"] for r, n in alert_nodes(alerting) if r["uid"] == rule_uid]
    return str(expr)


def _worst(
    prom: PrometheusServer, rule_uid: str, since_s: float, instance: str | None = None
) -> float:
    """The largest value the rule's query had at any second since ``since_s``
    (as its evaluations would have seen it), for ``instance`` if given."""
    series = prom.query_range(alert_expr(rule_uid), since_s, time.time(), 1)
    if instance is not None:
        assert {s.labels.get("triggerhook_instance") for s in series} == {instance}, series
    return max((v for s in series for v in s.values if not math.isnan(v)), default=0.0)


def _query_everything(prom: PrometheusServer, instance: str, started_s: float) -> list[str]:
    """Every panel's query (one instance, and All) over the run, every alert's
    query now, and the variable: what would leave something empty."""
    failures: list[str] = []
    end_s = time.time()
    range_s = int(end_s - started_s) + 1
    for selection in ([instance], [ALL]):
        variables = {"instance": regex_value(selection, ".*")}
        for title, ref_id, expr in exprs(load_dashboard()):
            text = render_promql(expr, variables, INTERVAL_S, range_s, SCRAPE_INTERVAL_S)
            answer = prom.query_range(text, started_s, end_s, INTERVAL_S)
            failures += [
                f"{title!r} {ref_id} ({selection}): {p}\n  {text}" for p in _problems(answer)
            ]
    for rule, node in alert_nodes(grafana.load_yaml(ALERTING)):
        expr = node["model"]["expr"]
        failures += [f"alert {rule['uid']}: {p}\n  {expr}" for p in _problems(prom.query(expr))]
    values = prom.label_values("triggerhook_instance", "triggerhook_running")
    if values != [instance]:
        failures.append(f"variable {VARIABLE_QUERY}: {values}")
    return failures
