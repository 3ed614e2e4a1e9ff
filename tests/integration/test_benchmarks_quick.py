"""The benchmark suite's quick mode, as CI runs it: ``python -m benchmarks --quick``
against the real MariaDB and RabbitMQ. It checks the outputs, not the speed:
every scenario produced its figures or says why it failed, and the JSON,
Markdown and PNG files are written. No threshold is judged in quick mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.tcpproxy import proxied

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = {
    "ceilings",
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
}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The plots each scenario's data gives, when the scenario went through.
PLOTS = {
    "burst": {"lateness-burst.png", "burst-throughput.png"},
    "precision": {
        "lateness-precision-idle.png",
        "lateness-precision-http_load.png",
        "lateness-precision-http_load_one.png",
    },
    "hostile": {"lateness-hostile.png"},
    "capacity": {"capacity.png"},
}
# Quick mode's capacity steps (500 and 1,000 fires/s): the figures each step gives.
CAPACITY_STEPS = (500, 1000)
CAPACITY_MEASURES = (
    "fired_p99",
    "early",
    "missing",
    "backlog_ms",
    "cpu_daemon_per_1k_s",
    "cpu_mariadb_per_1k_s",
    "cpu_rabbitmq_per_1k_s",
)


def _run_quick(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out)]
    # The servers come from the arguments, not from whatever the caller had set.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERHOOK_")}
    return subprocess.run(
        [*command, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def _check_scenario(scenario: dict[str, Any]) -> None:
    name = scenario["name"]
    assert scenario["figures"], f"{name}: no figure rows"
    if scenario["status"] == "ok":
        assert not scenario["errors"], name
    else:
        assert scenario["status"] == "failed", name
        assert all(isinstance(e, str) and e for e in scenario["errors"]), name
        assert scenario["errors"], f"{name} failed without saying why"
    for figure in scenario["figures"]:
        measured = figure["value"] is not None
        # Each figure is either measured or explicitly failed, never both or neither.
        assert measured != (figure["failure"] is not None), figure
        assert figure["met"] is None, f"quick mode judged {figure['key']}"
        if not measured:
            assert scenario["status"] == "failed", figure


# benchmarks/pending.py in quick mode: its levels, and its bound on memory.
PENDING_LEVELS = (1_000, 20_000)
PENDING_MEASURES = (
    "fired_p50",
    "fired_p99",
    "early",
    "create_p50",
    "create_p99",
    "cancel_p50",
    "cancel_p99",
    "arm_read_ms",
    "any_due_ms",
    "probe_ms",
    "rows_read_per_fire",
    "cpu_mariadb_us",
    "cpu_mariadb_net_us",
    "rss_mib",
    "table_mib",
    "index_mib",
)
QUICK_MAX_IN_MEMORY = 5_000


def _check_pending(pending: dict[str, Any], same_second: dict[str, Any]) -> None:
    """Every level's figures side by side, none early; many due at once never
    held more than max_tasks_in_memory."""
    if pending["status"] == "ok":
        values = {f["key"]: f["value"] for f in pending["figures"]}
        expected = {f"pending.{n}.{m}" for n in PENDING_LEVELS for m in PENDING_MEASURES}
        assert set(values) == expected, sorted(set(values) ^ expected)
        assert all(values[f"pending.{n}.early"] == 0 for n in PENDING_LEVELS), values
        # The bigger level's table is bigger: the fill really grew it.
        assert values["pending.20000.table_mib"] > values["pending.1000.table_mib"], values
    if same_second["status"] == "ok":
        values = {f["key"]: f["value"] for f in same_second["figures"]}
        assert 0 < values["same_second.in_memory_max"] <= QUICK_MAX_IN_MEMORY, values
        assert values["same_second.early"] == 0, values


def _check_capacity(scenario: dict[str, Any]) -> None:
    """The rate held, and every measure of each step that ran: those held and the
    first not held, which ends the stepping."""
    figures = {f["key"] for f in scenario["figures"]}
    assert "capacity.held_fires_per_s" in figures, sorted(figures)
    if scenario["status"] != "ok":
        return
    (held,) = (f["value"] for f in scenario["figures"] if f["key"] == "capacity.held_fires_per_s")
    assert held in (0, *CAPACITY_STEPS), held
    ran = [rate for rate in CAPACITY_STEPS if rate <= held]
    ran += [rate for rate in CAPACITY_STEPS if rate > held][:1]
    steps = {f"capacity.{rate}.{measure}" for rate in ran for measure in CAPACITY_MEASURES}
    assert figures == {"capacity.held_fires_per_s", *steps}, sorted(figures)
    lateness = {d["key"] for d in scenario["distributions"]}
    assert lateness == {f"capacity.{rate}.{m}" for rate in ran for m in ("fired", "received")}


@pytest.mark.slow
def test_quick_mode_reports_every_scenario_and_writes_its_outputs(tmp_path: Path) -> None:
    out, publish = tmp_path / "results", tmp_path / "docs"
    done = _run_quick(out, "--publish", str(publish))
    assert done.returncode in (0, 1), done.stderr[-5000:]

    report = json.loads((out / "results.json").read_text())
    assert report["config"]["quick"] is True
    assert report["machine"]["cpus"] >= 1
    assert report["versions"]["mariadb"] and report["versions"]["rabbitmq"]
    scenarios = {s["name"]: s for s in report["scenarios"]}
    assert set(scenarios) == SCENARIOS
    for scenario in scenarios.values():
        _check_scenario(scenario)
    _check_capacity(scenarios["capacity"])
    _check_pending(scenarios["pending"], scenarios["same_second"])
    failed = [s["name"] for s in scenarios.values() if s["status"] == "failed"]
    assert (done.returncode == 1) == bool(failed or report["plot_error"]), done.stderr[-5000:]

    markdown = (out / "results.md").read_text()
    assert markdown == (publish / "results.md").read_text()
    for scenario in scenarios.values():
        for figure in scenario["figures"]:
            assert figure["label"] in markdown, figure["key"]
    assert "not judged (quick)" in markdown
    # No verdicts in quick mode: "| met |" only as the column's header.
    assert markdown.count("| met |") == 1
    assert "not met" not in markdown

    expected = set().union(*(PLOTS.get(name, set()) for name in SCENARIOS if name not in failed))
    assert expected <= set(report["plots"]), report["plots"]
    for name in report["plots"]:
        for folder in (out, publish):
            assert (folder / name).read_bytes().startswith(PNG_SIGNATURE), folder / name
        assert f"({name})" in markdown, name


def test_the_servers_are_the_ones_given_and_the_report_names_them(
    tmp_path: Path, mysql_url: str, amqp_url: str
) -> None:
    # Through proxies on ports of their own: what went through them was sent
    # to the servers the flags named, and nowhere else could have served it.
    with (
        proxied(f"{mysql_url}/ignored") as (database_proxy, database_url),
        proxied(amqp_url) as (broker_proxy, broker_url),
    ):
        done = _run_quick(
            tmp_path,
            "--only",
            "ceilings",
            "--database-url",
            database_url,
            "--amqp-url",
            broker_url,
        )
        used = database_proxy.accepted, broker_proxy.accepted
    assert done.returncode == 0, done.stderr[-5000:]
    assert all(used), used
    servers = json.loads((tmp_path / "results.json").read_text())["servers"]
    assert servers["database"].startswith(f"mysql://root:@127.0.0.1:{database_proxy.port}/")
    assert "ignored" not in servers["database"]  # each scenario makes its own database
    assert servers["amqp"] == f"amqp://guest:***@127.0.0.1:{broker_proxy.port}/%2F"
    assert servers["innodb_buffer_pool_mib"] > 0
    markdown = (tmp_path / "results.md").read_text()
    assert f"database `{servers['database']}`" in markdown
    assert f"RabbitMQ `{servers['amqp']}`" in markdown
