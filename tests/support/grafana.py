"""The Grafana files under grafana/, read the way Grafana reads them, and their
queries run against a real InfluxDB.

Grafana itself does not run in the tests. Instead:

* :func:`load_yaml` / :func:`load_dashboard` parse the provisioning files and
  the dashboard JSON;
* :func:`panels`, :func:`dashboard_queries` and :func:`alert_queries` list
  every InfluxQL query a panel, the template variable or an alert rule runs;
* :func:`render_dashboard_query` substitutes the macros and variables the way
  Grafana's InfluxDB data source does in a dashboard (``$timeFilter`` for a
  range ending now, ``$__interval``, ``$__interval_ms``, ``$instance`` in
  regex form); :func:`render_alert_query` the way Grafana's back end does for
  an alert rule (absolute ``$timeFilter`` from the rule's relative range);
* support.influx runs the result against InfluxDB.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from support.amqp import EventConsumer
from support.daemon import collect_ids, missing_ids

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "grafana"
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "influxdb.yaml"
DASHBOARD_PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "triggerhook.yaml"
ALERTING = GRAFANA / "provisioning" / "alerting" / "triggerhook.yaml"
DASHBOARD = GRAFANA / "dashboards" / "triggerhook.json"

ALL = "$__all"  # Grafana's value of a variable's "All" option
EXPRESSION_UID = "__expr__"  # the data source uid of server-side expressions

# What Grafana escapes in a value put into a regex (lodash's escapeRegExp).
_REGEX_SPECIAL = re.compile(r"[\\^$.*+?()\[\]{}|]")
# Variable references Grafana recognises: $name, ${name}, ${name:format}, [[name]].
_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)\]\]")


def load_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise AssertionError(f"{path}: expected a mapping at the top level")
    return data


def load_dashboard(path: Path = DASHBOARD) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise AssertionError(f"{path}: expected a JSON object")
    return data


# -- what the files contain --------------------------------------------------------


@dataclass(frozen=True)
class PanelQuery:
    panel_id: int
    panel: str  # the title
    ref_id: str
    query: str  # raw InfluxQL, macros and variables unsubstituted


@dataclass(frozen=True)
class AlertQuery:
    rule_uid: str
    rule: str  # the title
    ref_id: str
    query: str
    from_s: int  # relativeTimeRange: seconds before the evaluation time
    to_s: int


def panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in (collapsed) rows; rows themselves too."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries(dashboard: Mapping[str, Any]) -> list[PanelQuery]:
    return [
        PanelQuery(int(panel["id"]), str(panel["title"]), str(t["refId"]), str(t["query"]))
        for panel in panels(dashboard)
        for t in panel.get("targets", [])
        if not t.get("hide")
    ]


def rules(alerting: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for group in alerting.get("groups", []):
        yield from group.get("rules", [])


def alert_queries(alerting: Mapping[str, Any]) -> list[AlertQuery]:
    """The data-source queries of every rule (expression nodes left out)."""
    found: list[AlertQuery] = []
    for rule in rules(alerting):
        for node in rule["data"]:
            if node["datasourceUid"] == EXPRESSION_UID:
                continue
            span = node["relativeTimeRange"]
            found.append(
                AlertQuery(
                    str(rule["uid"]),
                    str(rule["title"]),
                    str(node["refId"]),
                    str(node["model"]["query"]),
                    int(span["from"]),
                    int(span.get("to", 0)),
                )
            )
    return found


# -- substitution ------------------------------------------------------------------


def format_interval(interval_ms: int) -> str:
    """An interval as Grafana writes ``$__interval`` (whole units, truncated)."""
    for unit, size_ms in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if interval_ms >= size_ms:
            return f"{interval_ms // size_ms}{unit}"
    return f"{max(1, interval_ms)}ms"


def regex_value(values: Sequence[str], all_value: str | None) -> str:
    """A multi-value variable in a regex (``=~ /^$var$/``), as Grafana's InfluxDB
    data source formats it: the custom all-value as is, else the escaped values,
    several as an alternation."""
    if list(values) == [ALL]:
        if all_value is None:
            raise ValueError("'All' selected but the variable has no allValue")
        return all_value
    escaped = [_REGEX_SPECIAL.sub(r"\\\g<0>", value) for value in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def _substitute(query: str, replacements: Mapping[str, str]) -> str:
    """Replace every variable reference; an unknown one is an error (Grafana would
    leave it in, and InfluxDB would reject or mis-read the query)."""

    def replace(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group is not None)
        if name not in replacements:
            raise ValueError(f"unknown variable {match.group(0)!r} in query: {query}")
        return replacements[name]

    return _VARIABLE.sub(replace, query)


def render_dashboard_query(
    query: str, variables: Mapping[str, str], since: str, interval_ms: int
) -> str:
    """``query`` as a dashboard with the time range ``now-<since>`` .. ``now``
    (``since`` a Grafana duration such as ``5m``) sends it.

    ``variables`` maps template variable names to their formatted values (see
    :func:`regex_value`)."""
    interval = format_interval(interval_ms)
    return _substitute(
        query,
        {
            "timeFilter": f"time >= now() - {since}",
            "__interval": interval,
            "interval": interval,
            "__interval_ms": str(interval_ms),
            **variables,
        },
    )


def render_alert_query(query: str, now_ms: int, from_s: int, to_s: int, interval_ms: int) -> str:
    """``query`` as Grafana's back end sends it when evaluating a rule at
    ``now_ms``: ``$timeFilter`` becomes absolute epoch-ms bounds, and no
    dashboard variable exists."""
    interval = format_interval(interval_ms)
    start_ms, end_ms = now_ms - from_s * 1000, now_ms - to_s * 1000
    return _substitute(
        query,
        {
            "timeFilter": f"time >= {start_ms}ms and time <= {end_ms}ms",
            "__interval": interval,
            "interval": interval,
            "__interval_ms": str(interval_ms),
        },
    )


def quoted_identifiers(query: str) -> set[str]:
    """The double-quoted identifiers of an InfluxQL query (measurements, fields,
    tags, aliases)."""
    return set(re.findall(r'"([^"]+)"', query))


# -- Grafana's provisioning schema (apiVersion 1), for both dashboards' tests --------------
# Grafana silently ignores a key it does not read, so a misspelt one would go unnoticed.
ALERT_GROUP_KEYS = {"orgId", "name", "folder", "interval", "rules"}
ALERT_RULE_KEYS = {
    "uid", "title", "condition", "data", "dashboardUid", "panelId", "noDataState",
    "execErrState", "for", "keepFiringFor", "annotations", "labels", "isPaused",
    "notification_settings",
}  # fmt: skip
ALERT_NODE_KEYS = {"refId", "queryType", "relativeTimeRange", "datasourceUid", "model"}
EXPRESSION_TYPES = {"math", "reduce", "threshold", "resample", "classic_conditions"}


def only_known_keys(entry: Mapping[str, Any], known: set[str], what: str) -> None:
    unknown = set(entry) - known
    assert not unknown, f"{what}: keys Grafana does not read: {sorted(unknown)}"


def drive_the_daemon(http_url: str, consumer: EventConsumer, name: str) -> None:
    """What a dashboard's queries need to find data: tasks that fire (over the
    HTTP API, routing key ``fire.<name>``, for a consumer bound to ``fire.#``),
    a 404, a cancel, a reschedule, and one unroutable event that the daemon
    keeps retrying (returned, publish retries). Ids start with ``name``."""
    routed = [f"{name}-{n}" for n in range(30)]
    with httpx.Client(base_url=http_url, timeout=30.0) as client:
        for n, task_id in enumerate(routed):
            body = {"id": task_id, "delay": 0.3 + n * 0.05, "routing_key": f"fire.{name}"}
            assert client.post("/v1/tasks", json=body).status_code == 201
        far = f"{name}-far"
        assert client.post("/v1/tasks", json={"id": far, "delay": 3600}).status_code == 201
        assert client.patch(f"/v1/tasks/{far}", json={"delay": 7200}).status_code == 200
        assert client.delete(f"/v1/tasks/{far}").status_code == 204
        assert client.get(f"/v1/tasks/{name}-unknown").status_code == 404
        stuck = {"id": f"{name}-stuck", "delay": 0, "routing_key": f"unbound.{name}"}
        assert client.post("/v1/tasks", json=stuck).status_code == 201
    assert not missing_ids(routed, collect_ids(consumer, routed, timeout_s=30))
