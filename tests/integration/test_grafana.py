"""The Grafana files (grafana/): provisioning structure, and every panel's and
alert rule's query returning data from a real daemon's metrics in a real
InfluxDB 1.x.

Grafana itself cannot run here, so the structural tests read the files the way
Grafana's provisioning does, and the data test substitutes the macros the way
Grafana does (support/grafana.py) before running each query through InfluxDB's
``/query`` endpoint. The names the queries use are checked against
docs/metrics.md, the contract the engine writes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from support import grafana, influx
from support.amqp import AmqpNames, EventConsumer
from support.daemon import DaemonGroup, daemon_env, schedule_tasks
from support.influx import Series
from support.names import unique_name
from support.waiting import now_ms, wait_for

DATASOURCE_UID = "triggerhook-influxdb"
DASHBOARD_PATH_IN_GRAFANA = "/var/lib/grafana/dashboards"
MEASUREMENTS = ("triggerhook", "triggerhook_http")
TAGS = {"instance", "host"}
INSTANCE_FILTER = '"instance" =~ /^$instance$/'
VARIABLE_QUERY = 'SHOW TAG VALUES FROM "triggerhook" WITH KEY = "instance"'
# The figures the issue asks the dashboard to show.
REQUIRED_FIELDS = {
    "fired", "scheduled",
    "lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms",
    "heap", "send_buffer", "unconfirmed", "in_memory", "shards", "members", "shards_lost",
    "tasks_db", "oldest_overdue_ms",
    "db_errors", "broker_reconnects", "returned", "nacked", "publish_retries", "metrics_dropped",
    "requests_2xx", "requests_4xx", "requests_5xx", "latency_p99_ms",
}  # fmt: skip
NO_DATA_STATES = {"Alerting", "NoData", "OK", "KeepLast"}
EXEC_ERR_STATES = {"Alerting", "Error", "OK", "KeepLast"}
DURATION = re.compile(r"^(\d+[smhd])+$")

# The keys Grafana's provisioning reads (apiVersion 1); any other is silently
# ignored by Grafana, so a misspelt key would go unnoticed.
DATASOURCE_KEYS = {
    "name", "type", "access", "orgId", "uid", "url", "user", "password", "database",
    "basicAuth", "basicAuthUser", "withCredentials", "isDefault", "jsonData",
    "secureJsonData", "version", "editable",
}  # fmt: skip
PROVIDER_KEYS = {
    "name", "orgId", "folder", "folderUid", "type", "disableDeletion", "allowUiUpdates",
    "updateIntervalSeconds", "options",
}  # fmt: skip

SINCE = "5m"  # the dashboard's time range in the data test: now-5m .. now
INTERVAL_MS = 1000  # $__interval: the data source's minimum (timeInterval 1s)


# -- the contract: docs/metrics.md ----------------------------------------------------


def documented_fields() -> dict[str, set[str]]:
    """measurement -> the fields docs/metrics.md lists for it."""
    fields: dict[str, set[str]] = {}
    current: str | None = None
    for line in (grafana.REPO / "docs" / "metrics.md").read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^## `(\w+)`", line)
        if heading:
            current = heading.group(1)
            fields[current] = set()
        elif line.startswith("## "):
            current = None
        elif current is not None and line.startswith("| `"):
            first_cell = line.split("|")[1]
            fields[current].update(re.findall(r"`(\w+)`", first_cell))
    return fields


def field_references(query: str) -> tuple[str, set[str]]:
    """The measurement a query reads and the quoted names it uses that are
    neither the measurement, a tag, nor an alias it defines (i.e. its fields)."""
    measurement = re.search(r'\bFROM "(\w+)"', query)
    assert measurement, f'no FROM "<measurement>" in {query}'
    names = {m[2] for m in re.finditer(r'(\bAS\s+)?"([^"]*)"', query) if not m[1]}  # not aliases
    return measurement.group(1), names - TAGS - {measurement.group(1)}


# -- provisioning -----------------------------------------------------------------------


def test_datasource_is_provisioned_from_environment_variables() -> None:
    config = grafana.load_yaml(grafana.DATASOURCES)
    assert config["apiVersion"] == 1
    (source,) = config["datasources"]
    grafana.only_known_keys(source, DATASOURCE_KEYS, "data source")
    assert source["uid"] == DATASOURCE_UID
    assert source["type"] == "influxdb" and source["access"] == "proxy"
    assert source["url"] == "${INFLUXDB_URL}"
    assert source["user"] == "${INFLUXDB_USER}"
    assert source["jsonData"]["dbName"] == "${INFLUXDB_DATABASE}"
    assert source["database"] == "${INFLUXDB_DATABASE}"  # older Grafana versions read this
    assert source["jsonData"]["version"] == "InfluxQL"
    assert source["secureJsonData"]["password"] == "${INFLUXDB_PASSWORD}"
    assert "password" not in source, "a plain-text password would be readable in the UI"


def test_dashboard_provider_loads_the_mounted_dashboards() -> None:
    config = grafana.load_yaml(grafana.DASHBOARD_PROVIDERS)
    assert config["apiVersion"] == 1
    (provider,) = config["providers"]
    grafana.only_known_keys(provider, PROVIDER_KEYS, "dashboard provider")
    assert provider["type"] == "file" and provider["name"] and provider["folder"]
    assert provider["options"]["path"] == DASHBOARD_PATH_IN_GRAFANA
    assert grafana.DASHBOARD.parent == grafana.GRAFANA / "dashboards"
    # The documented run command mounts that directory where the provider looks,
    # and each provisioning directory where Grafana reads that kind of file.
    docs = (grafana.REPO / "docs" / "grafana.md").read_text(encoding="utf-8")
    assert f"grafana/dashboards:{DASHBOARD_PATH_IN_GRAFANA}" in docs
    for path in (grafana.DATASOURCES, grafana.DASHBOARD_PROVIDERS, grafana.ALERTING):
        kind = path.parent.name
        assert f"grafana/provisioning/{kind}:/etc/grafana/provisioning/{kind}" in docs, kind
    for variable in ("INFLUXDB_URL", "INFLUXDB_DATABASE", "INFLUXDB_USER", "INFLUXDB_PASSWORD"):
        assert f"{variable}=" in docs, f"docs/grafana.md does not show how to set {variable}"


def test_dashboard_panels_query_the_provisioned_source_in_influxql() -> None:
    dashboard = grafana.load_dashboard()
    assert dashboard["uid"] == "triggerhook" and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int)
    shown = [p for p in grafana.panels(dashboard) if p["type"] != "row"]
    assert shown, "the dashboard has no panels"
    ids = [p["id"] for p in grafana.panels(dashboard)]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {ids}"
    for panel in shown:
        where = f"panel {panel['id']} {panel['title']!r}"
        assert panel["datasource"] == {"type": "influxdb", "uid": DATASOURCE_UID}, where
        assert panel.get("description"), f"{where}: say what it shows"
        position = panel["gridPos"]
        assert position["x"] + position["w"] <= 24, f"{where} is wider than the grid"
        assert panel["targets"], f"{where} has no query"
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), where
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == DATASOURCE_UID, where
            assert target["rawQuery"] is True and target["resultFormat"] == "time_series", where
            query = target["query"]
            assert INSTANCE_FILTER in query and "$timeFilter" in query, f"{where}: {query}"
            if panel["type"] == "timeseries":
                assert re.search(r"GROUP BY time\(\$__interval\)", query), f"{where}: {query}"


def test_dashboard_has_the_instance_variable() -> None:
    variables = grafana.load_dashboard()["templating"]["list"]
    (variable,) = (v for v in variables if v["name"] == "instance")
    assert variable["type"] == "query"
    assert variable["datasource"]["uid"] == DATASOURCE_UID
    assert variable["query"] == VARIABLE_QUERY
    assert variable["multi"] is True and variable["includeAll"] is True
    assert variable["allValue"] == ".*"  # All: one short regex, not a list of every instance


def test_dashboard_shows_every_required_figure_by_its_documented_name() -> None:
    documented = documented_fields()
    assert set(MEASUREMENTS) <= set(documented), documented.keys()
    used: set[str] = set()
    for query in grafana.dashboard_queries(grafana.load_dashboard()):
        measurement, fields = field_references(query.query)
        assert measurement in MEASUREMENTS, query
        unknown = fields - documented[measurement]
        assert not unknown, f"{query.panel!r} uses undocumented {sorted(unknown)} of {measurement}"
        used |= fields
    assert used >= REQUIRED_FIELDS, f"not on the dashboard: {sorted(REQUIRED_FIELDS - used)}"


# -- alert rules ------------------------------------------------------------------------


def _rules_by_uid() -> dict[str, dict[str, Any]]:
    return {rule["uid"]: rule for rule in grafana.rules(grafana.load_yaml(grafana.ALERTING))}


def _check_node(rule_uid: str, node: Mapping[str, Any], ref_ids: set[str]) -> None:
    where = f"rule {rule_uid} node {node['refId']}"
    grafana.only_known_keys(node, grafana.ALERT_NODE_KEYS, where)
    model = node["model"]
    assert model["refId"] == node["refId"], where
    if node["datasourceUid"] == grafana.EXPRESSION_UID:
        assert model["datasource"]["uid"] == grafana.EXPRESSION_UID, where
        assert model["type"] in grafana.EXPRESSION_TYPES, where
        if model["type"] == "math":
            inputs = set(re.findall(r"\$\{?(\w+)", model["expression"]))
        else:
            inputs = {model["expression"]}
        assert inputs and inputs <= ref_ids - {node["refId"]}, f"{where}: inputs {inputs}"
        if model["type"] == "threshold":
            (condition,) = model["conditions"]
            assert condition["evaluator"]["type"] in {"gt", "lt", "within_range", "outside_range"}
            assert all(isinstance(p, int | float) for p in condition["evaluator"]["params"])
        return
    assert node["datasourceUid"] == DATASOURCE_UID, where
    assert model["datasource"]["uid"] == DATASOURCE_UID, where
    assert model["rawQuery"] is True and model["query"], where
    span = node["relativeTimeRange"]
    assert span["from"] > span.get("to", 0) >= 0, where
    assert "$instance" not in model["query"], f"{where}: alert queries have no dashboard variables"


def test_alert_rules_are_in_grafanas_provisioning_format() -> None:
    config = grafana.load_yaml(grafana.ALERTING)
    assert config["apiVersion"] == 1
    dashboard = grafana.load_dashboard()
    panel_ids = {p["id"] for p in grafana.panels(dashboard)}
    documented = documented_fields()
    uids: list[str] = []
    for group in config["groups"]:
        grafana.only_known_keys(group, grafana.ALERT_GROUP_KEYS, "rule group")
        assert group["name"] and group["folder"] and group["orgId"] == 1
        assert DURATION.match(group["interval"]), group["interval"]
        for rule in group["rules"]:
            grafana.only_known_keys(rule, grafana.ALERT_RULE_KEYS, f"rule {rule['uid']}")
            uids.append(rule["uid"])
            assert rule["title"] and DURATION.match(rule["for"]), rule["uid"]
            assert rule["noDataState"] in NO_DATA_STATES, rule["uid"]
            assert rule["execErrState"] in EXEC_ERR_STATES, rule["uid"]
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]
            for text in rule["annotations"].values():
                # Provisioning expands $NAME from the environment in some Grafana
                # versions: templates must use .Labels/.Values, never $labels.
                assert "$" not in text, f"rule {rule['uid']}: {text}"
            assert rule["labels"]["service"] == "triggerhook", rule["uid"]
            assert rule["dashboardUid"] == dashboard["uid"] and rule["panelId"] in panel_ids
            ref_ids = [node["refId"] for node in rule["data"]]
            assert len(ref_ids) == len(set(ref_ids)) and rule["condition"] in ref_ids
            for node in rule["data"]:
                _check_node(rule["uid"], node, set(ref_ids))
    assert len(uids) == len(set(uids)), uids
    for query in grafana.alert_queries(config):
        measurement, fields = field_references(query.query)
        assert fields and fields <= documented[measurement], query


def _threshold(rule: Mapping[str, Any]) -> tuple[str, list[float]]:
    (node,) = (n for n in rule["data"] if n["refId"] == rule["condition"])
    (condition,) = node["model"]["conditions"]
    return condition["evaluator"]["type"], condition["evaluator"]["params"]


def test_alert_rules_watch_overdue_publish_failures_and_silence() -> None:
    rules = _rules_by_uid()
    overdue = rules["triggerhook-oldest-overdue"]
    (query,) = (n["model"]["query"] for n in overdue["data"] if "query" in n["model"])
    assert '"oldest_overdue_ms"' in query and "/ 1000" in query  # seconds
    assert _threshold(overdue) == ("gt", [5]) and overdue["for"] == "1m"

    failures = rules["triggerhook-publish-failures"]
    (query,) = (n["model"]["query"] for n in failures["data"] if "query" in n["model"])
    assert {"returned", "nacked", "publish_retries"} <= grafana.quoted_identifiers(query)
    assert 'GROUP BY time(1m), "instance"' in query  # one alert per instance
    (condition,) = (n for n in failures["data"] if n["refId"] == failures["condition"])
    assert condition["model"] == {**condition["model"], "type": "math", "expression": "$B > 0"}
    assert failures["for"] == "5m" and failures["noDataState"] == "OK"

    silence = rules["triggerhook-no-metrics"]
    (node,) = (n for n in silence["data"] if "query" in n["model"])
    assert node["model"]["query"].startswith("SELECT count(")
    assert node["relativeTimeRange"]["from"] == 120
    # No point in the window: InfluxDB answers no series at all, which Grafana
    # treats as "no data"; that must alert.
    assert silence["noDataState"] == "Alerting" and _threshold(silence) == ("lt", [1])


# -- every query returns data after a real run -------------------------------------------


def _total(influx_url: str, database: str, instance: str, measurement: str, field: str) -> float:
    statement = f'SELECT sum("{field}") FROM "{measurement}" WHERE "instance" = \'{instance}\''
    series = influx.query(influx_url, database, statement)
    return float(series[0].values[0][1]) if series else 0.0


def _non_null(series: list[Series], column: str) -> list[Any]:
    return [row[column] for s in series for row in s.rows if row.get(column) is not None]


def _problems(series: list[Series]) -> list[str]:
    """Why a query's answer would leave its panel empty (or a column of it)."""
    if not series:
        return ["no series"]
    columns = {c for s in series for c in s.columns} - {"time"}
    return [f"column {c!r} only null" for c in sorted(columns) if not _non_null(series, c)]


def test_every_panel_and_alert_query_returns_data(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_queue: EventConsumer,
    daemons: DaemonGroup,
    influx_url: str,
    influx_database: str,
) -> None:
    instance = unique_name("grafana-")
    env = daemon_env(
        database_url,
        amqp_url,
        amqp_names.exchange,
        instance,
        metrics_url=influx_url,
        metrics_database=influx_database,
        metrics_interval_ms=200,
        metrics_recount_s=1,
        publish_retry_max_ms=300,
    )
    daemon = daemons.start(env, "grafana", "--init-db")
    daemon.wait_ready()
    daemon.wait_for_line("metrics: writing", 10)
    http_url = f"http://127.0.0.1:{env['TRIGGERHOOK_HTTP_PORT']}"
    grafana.drive_the_daemon(http_url, event_queue, "grafana")

    def written(field: str, at_least: float, measurement: str = "triggerhook") -> bool:
        total = _total(influx_url, influx_database, instance, measurement, field)
        return total >= at_least

    # Points arrive each period: wait until they show the whole run.
    wait_for(lambda: written("confirmed", 30), 20, "confirmed events not in InfluxDB")
    wait_for(lambda: written("returned", 2), 20, "returned events not in InfluxDB")
    wait_for(lambda: written("cancelled", 1) and written("rescheduled", 1), 20)
    wait_for(lambda: written("requests_2xx", 34, "triggerhook_http"), 20)
    wait_for(lambda: written("requests_4xx", 1, "triggerhook_http"), 20)

    dashboard = grafana.load_dashboard()
    failures: list[str] = []
    for selection in ([instance], [grafana.ALL]):
        variables = {"instance": grafana.regex_value(selection, ".*")}
        for query in grafana.dashboard_queries(dashboard):
            text = grafana.render_dashboard_query(query.query, variables, SINCE, INTERVAL_MS)
            failures += [
                f"panel {query.panel!r} {query.ref_id} ({selection}): {p}\n  {text}"
                for p in _problems(influx.query(influx_url, influx_database, text))
            ]
    at_ms = now_ms()
    alerting = grafana.load_yaml(grafana.ALERTING)
    for alert in grafana.alert_queries(alerting):
        text = grafana.render_alert_query(alert.query, at_ms, alert.from_s, alert.to_s, 1000)
        failures += [
            f"alert {alert.rule!r} {alert.ref_id}: {p}\n  {text}"
            for p in _problems(influx.query(influx_url, influx_database, text))
        ]
    assert not failures, "\n".join(failures)

    (variable,) = influx.query(influx_url, influx_database, VARIABLE_QUERY)
    assert [row["value"] for row in variable.rows] == [instance]


def test_alert_queries_see_the_conditions_they_watch(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_queue: EventConsumer,
    daemons: DaemonGroup,
    influx_url: str,
    influx_database: str,
) -> None:
    """An unroutable task keeps being retried: the failure rule's query counts it
    for this instance, the overdue rule's query sees it overdue, and the silence
    rule's query counts points; after the window with no point, the silence
    query answers no series (Grafana's "no data", which alerts)."""
    instance = unique_name("grafana-")
    env = daemon_env(
        database_url,
        amqp_url,
        amqp_names.exchange,
        instance,
        metrics_url=influx_url,
        metrics_database=influx_database,
        metrics_interval_ms=200,
        publish_retry_max_ms=300,
        http_enabled="false",
    )
    daemon = daemons.start(env, "grafana", "--init-db")
    daemon.wait_ready()
    daemon.wait_for_line("metrics: writing", 10)
    schedule_tasks(database_url, [("stuck", now_ms())])  # default routing key: unbound

    alerting = grafana.load_yaml(grafana.ALERTING)
    queries = {q.rule_uid: q for q in grafana.alert_queries(alerting)}

    def answer(rule_uid: str, at_ms: int | None = None) -> list[Series]:
        alert = queries[rule_uid]
        at_ms = now_ms() if at_ms is None else at_ms
        text = grafana.render_alert_query(alert.query, at_ms, alert.from_s, alert.to_s, 1000)
        return influx.query(influx_url, influx_database, text)

    def value(rule_uid: str) -> float:
        series = answer(rule_uid)
        return max(_non_null(series, series[0].columns[1]), default=0.0) if series else 0.0

    wait_for(lambda: value("triggerhook-oldest-overdue") > 1.0, 20, "overdue not seen")
    wait_for(lambda: value("triggerhook-publish-failures") > 0, 20, "failures not seen")
    assert {s.tags["instance"] for s in answer("triggerhook-publish-failures")} == {instance}
    assert value("triggerhook-no-metrics") >= 5
    # A window after every point written so far: no series at all, not a 0.
    silence = queries["triggerhook-no-metrics"]
    assert answer(silence.rule_uid, now_ms() + (silence.from_s + 1) * 1000) == []
