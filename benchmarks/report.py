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

from benchmarks.catalogue import (
    CEILING_SPECS,
    SCENARIOS,
    SPECS,
    STEP_SPECS,
    Spec,
    format_number,
)
from benchmarks.common import Recorder

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
    th_peer: float | None = None  # Trigger Hook's figure in this run (the ratio's base)


def _step_key(key: str) -> tuple[str, int, str] | None:
    """(scenario, step, measure) of a per-step figure's key; None for the others."""
    scenario, _, rest = key.partition(".")
    step, _, measure = rest.partition(".")
    if scenario in STEP_SPECS and step.isdigit() and measure:
        return scenario, int(step), measure
    return None


def _step_specs(recorders: Sequence[Recorder]) -> list[Spec]:
    """The specs of the per-step figures recorded, in the order of :data:`STEP_SPECS`;
    a step that failed has the figures it got (the failure is reported anyway)."""
    recorded = {key for rec in recorders for f in rec.figures if (key := _step_key(f.key))}
    steps = sorted({(scenario, step) for scenario, step, _ in recorded})
    return [
        Spec(f"{scenario}.{step}.{t.measure}", scenario, t.label.format(step=step), t.unit)
        for scenario, step in steps
        for t in STEP_SPECS[scenario]
        if (scenario, step, t.measure) in recorded
    ]


def evaluate(recorders: Sequence[Recorder], quick: bool, more: Sequence[Spec] = ()) -> list[Row]:
    """``more``: specs of figures a scenario names itself (instances: a row per
    daemon count and rate run)."""
    by_scenario = {rec.scenario: rec for rec in recorders}
    values = {f.key: f for rec in recorders for f in rec.figures}
    rows = []
    specs = [*CEILING_SPECS, *SPECS, *_step_specs(recorders), *more]
    specs.sort(key=lambda s: SCENARIOS.index(s.scenario))  # steps after their scenario's others
    for spec in specs:
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
        peer = values.get(spec.peer)
        th_peer = peer.value if peer is not None and peer.value > 0 else None
        base = th_peer or spec.th_here_value
        th_ratio = figure.value / base if base else None
        rows.append(Row(spec, figure.value, figure.detail, met, ratios, th_ratio, th_peer=th_peer))
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
        "trigger_hook_this_run": row.th_peer,
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
    return f"{format_number(row.value, row.spec.unit)} {row.spec.unit}"


def _ceiling_text(row: Row) -> str:
    names = {s.key: s.label for s in CEILING_SPECS}
    return "; ".join(f"{ratio:.0%} of {names[key]}" for key, ratio in row.ratios.items())


def _th_text(row: Row) -> str:
    if row.th_peer is not None and row.th_ratio is not None:
        peer = f"{format_number(row.th_peer, row.spec.unit)}/s"
        return f"{peer} in this run (this engine: {row.th_ratio:.2f}x)"
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
        if row.spec.scenario == "ceilings" or _step_key(row.spec.key):
            continue  # in their own tables
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


def steps_tables(rows: Sequence[Row]) -> list[str]:
    """A stepped scenario's per-step figures, a line a step; their labels and
    details are listed under Details."""
    cells: dict[str, dict[int, dict[str, str]]] = {}
    for row in rows:
        if found := _step_key(row.spec.key):
            scenario, step, measure = found
            text = row.missing if row.value is None else format_number(row.value, row.spec.unit)
            cells.setdefault(scenario, {}).setdefault(step, {})[measure] = text
    lines: list[str] = []
    for scenario, steps in cells.items():
        specs = STEP_SPECS[scenario]
        lines += ["", f"### {scenario}", ""]
        lines.append("| step | " + " | ".join(f"{s.column} ({s.unit})" for s in specs) + " |")
        lines.append("|---:|" + "---:|" * len(specs))
        for step, values in steps.items():
            lines.append(
                f"| {step:,} | " + " | ".join(values.get(s.measure, "") for s in specs) + " |"
            )
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


def _servers(meta: dict[str, Any]) -> str:
    servers = meta.get("servers")  # absent from runs before the benchmarks took URLs
    if not servers:
        return "- Servers: the local MariaDB and RabbitMQ."
    text = (
        f"- Servers: database `{servers['database']}` (InnoDB buffer pool "
        f"{servers['innodb_buffer_pool_mib']:,} MiB), RabbitMQ `{servers['amqp']}`."
    )
    if "cluster" in servers:  # the instances scenario's own servers
        text += f" The instances scenario: {servers['cluster']}."
    return text


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
        f"RAM, {machine['platform']}; the engine (or daemon) and the load generator on it.",
        _servers(meta),
        f"- Versions: {versions}; commit {meta['commit']}.",
        f"- Sizes: {config['tasks']:,} tasks per scenario; precision {config['precision_s']} s "
        f"at {config['fires_per_s']:,} fires/s; {config['clients']} HTTP clients; "
        f"capacity {', '.join(f'{r:,}' for r in config['capacity_rates'])} fires/s, "
        f"{config['capacity_step_s']} s a step; engine settings: defaults.",
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
    if steps := steps_tables(rows):
        parts += ["", "## Steps", *steps]
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
