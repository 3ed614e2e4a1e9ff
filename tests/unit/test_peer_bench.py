"""Trigger Hook's own benchmark run beside this engine's (benchmarks/peer.py,
``python -m benchmarks --trigger-hook PATH``): its output read, its task
count, and the report's ratios taken from the same run. A stand-in program
plays Trigger Hook (no Go toolchain, no database needed)."""

from __future__ import annotations

import contextlib
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # benchmarks/ is not installed: it runs from the repository
    sys.path.insert(0, str(REPO))

from benchmarks import peer, report  # noqa: E402
from benchmarks.common import Recorder  # noqa: E402

# Its output as it printed it here (2026-12-06, its creating_and_deleting
# test, 10,000 tasks), progress bars (stderr) aside.
CREATING = """count of task: 10000
Benchmark: max rate creating/deleting tasks
Creating task
Deleting task
+---------------+--------------+-------------+
|     TEST      |   DURATION   |  AVR RATE   |
+---------------+--------------+-------------+
| Creating task | 4.26337412s  | 2345.560047 |
| Deleting task | 2.645774692s | 3779.611329 |
+---------------+--------------+-------------+
"""
SENDING = """count of task: 10000
Benchmark: max rate sending/confirmation tasks
up initial state
sending/confirmation tasks
+-------------------+---------------+---------------+
|       TEST        |   DURATION    |   AVR RATE    |
+-------------------+---------------+---------------+
| Sending task      | 31.5ms        | 317460.317460 |
| Confirmation task | 101.2ms       | 98814.229249  |
+-------------------+---------------+---------------+
"""


def test_its_summary_tables_are_read() -> None:
    assert peer.rates(CREATING, "creating_and_deleting") == {
        "trigger_hook.create": 2345.560047,
        "trigger_hook.delete": 3779.611329,
    }
    assert peer.rates(SENDING, "sending_and_confirmation") == {
        "trigger_hook.sending": 317460.31746,
        "trigger_hook.confirm": 98814.229249,
    }


def test_a_table_of_the_other_test_or_none_gives_no_rate() -> None:
    assert peer.rates(SENDING, "creating_and_deleting") == {}
    assert peer.rates("count of task: 10\npanic: no database\n", "creating_and_deleting") == {}
    assert peer.rates("| Creating task | 1s | not a rate |", "creating_and_deleting") == {}


@given(st.integers(1, 10**9))
def test_its_task_count_divides_among_its_8_and_10_workers(tasks: int) -> None:
    count = peer.task_count(tasks)
    assert count % 8 == 0 and count % 10 == 0
    assert 40 <= count <= max(tasks, 40)
    assert count > tasks - 40


def _stand_in(tmp_path: Path, body: str) -> Path:
    """An executable that plays Trigger Hook's program."""
    program = tmp_path / "trigger-hook-benchmark"
    program.write_text(f"#!/bin/sh\n{body}\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program


@pytest.fixture
def no_database(monkeypatch: pytest.MonkeyPatch) -> None:
    @contextlib.contextmanager
    def database() -> Iterator[str]:
        yield "th_bench_go_test"

    monkeypatch.setattr(peer, "_database", database)


@pytest.mark.usefixtures("no_database")
def test_both_tests_run_with_the_database_in_its_variables(tmp_path: Path) -> None:
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "creating_and_deleting").write_text(CREATING)
    (tables / "sending_and_confirmation").write_text(SENDING)
    program = _stand_in(
        tmp_path,
        f'echo "$@ $DATABASE_NAME $DATABASE_HOST" >> {tmp_path}/calls\ncat {tables}/$2',
    )
    rec = Recorder(peer.SCENARIO)
    peer.run(rec, program, 10_015)
    assert not rec.errors
    assert {f.key: f.value for f in rec.figures} == {
        "trigger_hook.create": 2345.560047,
        "trigger_hook.delete": 3779.611329,
        "trigger_hook.sending": 317460.31746,
        "trigger_hook.confirm": 98814.229249,
    }
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [call.split()[:4] for call in calls] == [
        ["-test_name", "creating_and_deleting", "-task_count", "10000"],
        ["-test_name", "sending_and_confirmation", "-task_count", "10000"],
    ]
    assert all(call.split()[4] == "th_bench_go_test" for call in calls)


@pytest.mark.usefixtures("no_database")
def test_a_failed_or_unreadable_run_is_a_failed_part_naming_why(tmp_path: Path) -> None:
    rec = Recorder(peer.SCENARIO)
    peer.run(rec, _stand_in(tmp_path, "echo 'cannot connect' >&2; exit 3"), 1000)
    assert len(rec.errors) == 2 and all("exited 3" in e for e in rec.errors), rec.errors
    assert all("cannot connect" in e for e in rec.errors)
    rec = Recorder(peer.SCENARIO)
    peer.run(rec, _stand_in(tmp_path, "echo 'count of task: 1000'"), 1000)
    assert len(rec.errors) == 2 and all("no rate for" in e for e in rec.errors), rec.errors
    assert rec.figures == []


def _recorders(*figures: tuple[str, str, float]) -> list[Recorder]:
    recorders: dict[str, Recorder] = {}
    for scenario, key, value in figures:
        recorders.setdefault(scenario, Recorder(scenario)).add(key, value)
    return list(recorders.values())


def test_the_ratio_to_trigger_hook_is_to_its_figure_of_the_same_run() -> None:
    rows = report.evaluate(
        _recorders(
            ("create", "create.schedule_x8", 8000.0),
            ("trigger_hook", "trigger_hook.create", 4000.0),
        ),
        quick=False,
    )
    (row,) = [r for r in rows if r.spec.key == "create.schedule_x8"]
    assert row.th_peer == 4000.0
    assert row.th_ratio == 2.0
    assert "4,000/s in this run (this engine: 2.00x)" in report._th_text(row)


def test_without_a_run_of_it_the_ratio_is_to_the_catalogue_figure() -> None:
    rows = report.evaluate(_recorders(("create", "create.schedule_x8", 8632.0)), quick=False)
    (row,) = [r for r in rows if r.spec.key == "create.schedule_x8"]
    assert row.th_peer is None
    assert row.th_ratio == pytest.approx(8632.0 / row.spec.th_here_value)  # type: ignore[operator]
    assert "this run" not in report._th_text(row)
