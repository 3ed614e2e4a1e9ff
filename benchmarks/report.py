"""The catalogue of figures (labels, units, targets, ceilings, Trigger Hook's
figures) and the run's outputs: JSON and Markdown.

Every value in the outputs comes from a :class:`~benchmarks.common.Recorder`
of this run; a figure a failed scenario did not produce is shown as failed,
never filled in.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import Recorder


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
        return f"{op} {_number(self.bound, unit)} {unit}"


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

SPECS = (
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
        _ge(10_000),
        ("ceiling.insert",),
        "4,316/s (8 goroutines)",
        "1,396/s",
        4316,
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
        _ge(3_000),
        ("ceiling.insert",),
    ),
    Spec(
        "create.http_single_p99",
        "create",
        "create: HTTP single `POST /v1/tasks`, latency p99",
        "ms",
        _le(50),
    ),
    # One client, one call at a time (the capacity issue's target: p50 ≤ 1 ms).
    Spec(
        "create.sequential_p50",
        "create",
        "create: single `schedule`, one caller, one call at a time: latency p50",
        "ms",
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
        "steady 1,000/s: daemon CPU per fired task",
        "µs",
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
        _le(5),
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
        _le(10),
    ),
    Spec(
        "precision.http_load.early",
        "precision",
        "precision + HTTP load: events early",
        "events",
        _NONE_EARLY,
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

SCENARIOS = (
    "ceilings",
    "create",
    "delete",
    "sending",
    "burst",
    "near_due",
    "precision",
    "hostile",
    "takeover",
)


def _number(value: float, unit: str) -> str:
    if unit == "rows/task":
        return f"{value:,.2f}"
    if unit in ("ms", "s") and not float(value).is_integer():
        return f"{value:,.1f}"
    return f"{value:,.0f}"


# -- evaluation ------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One figure as reported: the value, or why there is none."""

    spec: Spec
    value: float | None
    detail: str
    met: bool | None  # None: no target, not measured, or not judged (quick)
    ratios: dict[str, float]
    th_ratio: float | None
    missing: str = ""


def evaluate(recorders: Sequence[Recorder], quick: bool) -> list[Row]:
    by_scenario = {rec.scenario: rec for rec in recorders}
    values = {f.key: f for rec in recorders for f in rec.figures}
    rows = []
    for spec in (*CEILING_SPECS, *SPECS):
        rec = by_scenario.get(spec.scenario)
        if rec is None:
            continue  # scenario not run
        figure = values.get(spec.key)
        if figure is None:
            why = "; ".join(rec.errors) or "not produced"
            rows.append(Row(spec, None, "", None, {}, None, f"FAILED: {why}"))
            continue
        met = None if quick or spec.target is None else spec.target.met(figure.value)
        ratios = {
            c: figure.value / values[c].value
            for c in spec.ceilings
            if c in values and values[c].value > 0
        }
        th_ratio = figure.value / spec.th_here_value if spec.th_here_value else None
        rows.append(Row(spec, figure.value, figure.detail, met, ratios, th_ratio))
    return rows


# -- JSON --------------------------------------------------------------------------------


def to_json(rows: Sequence[Row], recorders: Sequence[Recorder], meta: dict[str, Any]) -> str:
    scenarios = []
    for rec in recorders:
        scenarios.append(
            {
                "name": rec.scenario,
                "status": "failed" if rec.errors else "ok",
                "errors": rec.errors,
                "elapsed_s": round(rec.elapsed_s, 2),
                "figures": [_row_json(r) for r in rows if r.spec.scenario == rec.scenario],
                "distributions": [asdict(d) for d in rec.distributions],
            }
        )
    return json.dumps({**meta, "scenarios": scenarios}, indent=2)


def _row_json(row: Row) -> dict[str, Any]:
    spec = row.spec
    return {
        "key": spec.key,
        "label": spec.label,
        "value": row.value,
        "unit": spec.unit,
        "detail": row.detail,
        "target": spec.target.text(spec.unit) if spec.target else None,
        "met": row.met,
        "of_ceiling": row.ratios,
        "trigger_hook_here": spec.th_here or None,
        "trigger_hook_aws": spec.th_aws or None,
        "vs_trigger_hook_here": row.th_ratio,
        "failure": row.missing or None,
    }


# -- Markdown ------------------------------------------------------------------------------


def _met_text(row: Row, quick: bool) -> str:
    if row.spec.target is None:
        return ""
    if row.value is None:
        return "failed"
    if quick:
        return "not judged (quick)"
    return "met" if row.met else "**not met**"


def _value_text(row: Row) -> str:
    if row.value is None:
        return row.missing
    return f"{_number(row.value, row.spec.unit)} {row.spec.unit}"


def _ceiling_text(row: Row) -> str:
    names = {s.key: s.label for s in CEILING_SPECS}
    return "; ".join(f"{ratio:.0%} of {names[key]}" for key, ratio in row.ratios.items())


def _th_text(row: Row) -> str:
    if not row.spec.th_here:
        return ""
    if row.th_ratio is None:
        return row.spec.th_here
    return f"{row.spec.th_here} (this engine: {row.th_ratio:.2f}x)"


def figures_table(rows: Sequence[Row], quick: bool) -> list[str]:
    lines = [
        "| scenario | this engine | target | met | of its ceiling "
        "| Trigger Hook (Go), this machine | Trigger Hook, published (AWS) |",
        "|---|---:|---|---|---|---:|---:|",
    ]
    for row in rows:
        if row.spec.scenario == "ceilings":
            continue
        target = row.spec.target.text(row.spec.unit) if row.spec.target else ""
        lines.append(
            f"| {row.spec.label} | {_value_text(row)} | {target} | {_met_text(row, quick)} "
            f"| {_ceiling_text(row)} | {_th_text(row)} | {row.spec.th_aws} |"
        )
    return lines


def ceilings_table(rows: Sequence[Row]) -> list[str]:
    lines = ["| ceiling | rate | how |", "|---|---:|---|"]
    for row in rows:
        if row.spec.scenario == "ceilings":
            lines.append(f"| {row.spec.label} | {_value_text(row)} | {row.detail} |")
    return lines


def lateness_table(recorders: Sequence[Recorder]) -> list[str]:
    lines = [
        "| run | lateness | events | p50 | p90 | p99 | p99.9 | max | early |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rec in recorders:
        for d in rec.distributions:
            cells = " | ".join(f"{d.stats.get(q, float('nan')):,.1f}" for q in _QUANTILE_COLUMNS)
            run, _, measure = d.label.partition(": ")
            lines.append(f"| {run} | {measure} (ms) | {d.count:,} | {cells} | {d.early} |")
    return lines


_QUANTILE_COLUMNS = ("p50", "p90", "p99", "p99.9", "max")


def _details(rows: Sequence[Row]) -> list[str]:
    return [
        f"- {row.spec.label}: {row.detail}"
        for row in rows
        if row.detail and row.spec.scenario != "ceilings"  # their table shows it
    ]


def _header(meta: dict[str, Any]) -> list[str]:
    machine, config = meta["machine"], meta["config"]
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    mode = "quick mode (small sizes, targets not judged)" if config["quick"] else "full run"
    return [
        "# Benchmark results",
        "",
        f"Produced by `{meta['command']}` on {meta['when']} ({mode}; wall time "
        f"{meta['wall_s']:,.0f} s), from the JSON of the same run. Nothing here is "
        "edited by hand or estimated.",
        "",
        f"- Machine: {machine['cpu']}, {machine['cpus']} CPUs, {machine['memory_gib']} GiB "
        f"RAM, {machine['platform']}; MariaDB, RabbitMQ, the engine (or daemon) and the "
        "load generator all on it.",
        f"- Versions: {versions}; commit {meta['commit']}.",
        f"- Sizes: {config['tasks']:,} tasks per scenario; precision {config['precision_s']} s "
        f"at {config['fires_per_s']:,} fires/s; {config['clients']} HTTP clients; "
        "engine settings: defaults.",
        "- Trigger Hook (Go) columns: its own benchmark run on this machine, and the figures "
        "it published (AWS t2.micro app + RDS db.t3.micro MySQL 8).",
    ]


def markdown(
    rows: Sequence[Row], recorders: Sequence[Recorder], meta: dict[str, Any], plots: list[Path]
) -> str:
    quick = bool(meta["config"]["quick"])
    failures = [f"- **{rec.scenario} failed**: {e}" for rec in recorders for e in rec.errors]
    if meta.get("plot_error"):
        failures.append(f"- **plots failed**: {meta['plot_error']}")
    parts = [*_header(meta), "", "## Figures", "", *figures_table(rows, quick)]
    lateness, ceilings = lateness_table(recorders), ceilings_table(rows)
    if len(lateness) > 2:
        parts += ["", "## Lateness per task", "", *lateness]
    if len(ceilings) > 2:
        parts += ["", "## Ceilings (same run, same machine)", "", *ceilings]
    if failures:
        parts += ["", "## Failures", "", *failures]
    parts += ["", "## Details", "", *_details(rows)]
    if plots:
        parts += ["", "## Plots", ""]
        parts += [f"![{p.stem}]({p.name})" for p in plots]
    return "\n".join(parts) + "\n"
