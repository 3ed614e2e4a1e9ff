"""Trigger Hook (Go), the system this engine replaces, measured side by side.

``python -m benchmarks --trigger-hook PATH`` runs Trigger Hook's own
benchmark program (github.com/pvelx/triggerhook, ``cmd/benchmark``;
``scripts/trigger-hook-build`` builds it from a checkout with Debian's
packages) in the same run as this engine's scenarios, on the same MariaDB,
each of its two tests in a database of its own (dropped afterwards): its
creating and deleting rates (8 goroutines, one task a call) and its sending
and confirmation rates (overdue rows to an in-process consumer, then their
deletes). The report's ratios to Trigger Hook then come from this run, not
from a figure measured on another day (benchmarks/catalogue.py's ``peer``).
"""

from __future__ import annotations

import re
import secrets
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.engine import make_url

from benchmarks.common import Recorder, admin_statement, database_url

SCENARIO = "trigger_hook"

# Its summary table's rows (``| Creating task | 4.26s | 2345.56 |``, the rate
# in tasks a second), by test, and the figure each becomes.
TESTS: Mapping[str, Mapping[str, str]] = {
    "creating_and_deleting": {
        "Creating task": "trigger_hook.create",
        "Deleting task": "trigger_hook.delete",
    },
    "sending_and_confirmation": {
        "Sending task": "trigger_hook.sending",
        "Confirmation task": "trigger_hook.confirm",
    },
}
_ROW = re.compile(r"^\|\s*([A-Za-z ]+?)\s*\|\s*\S+\s*\|\s*([0-9]+(?:\.[0-9]+)?)\s*\|\s*$", re.M)
# Its sending test waits for exactly its task count to be confirmed: a run
# that misses one would wait for ever.
_TIMEOUT_S = 600.0


def task_count(tasks: int) -> int:
    """Its creating test splits the tasks among 8 goroutines and its sending
    test among 10 (each count a multiple of theirs, else the sending test
    waits for ever): the largest multiple of 40 up to ``tasks``, at least 40."""
    return max(40, tasks - tasks % 40)


def rates(output: str, test: str) -> dict[str, float]:
    """The figures ``test``'s summary table holds (tasks a second), by key."""
    rows = TESTS[test]
    return {rows[name]: float(rate) for name, rate in _ROW.findall(output) if name in rows}


def run(rec: Recorder, binary: Path, tasks: int) -> None:
    """Both of its tests with ``task_count(tasks)`` tasks, their rates recorded."""
    count = task_count(tasks)
    for test, rows in TESTS.items():
        with rec.part(f"Trigger Hook's {test}"), _database() as database:
            output = _run(binary, test, count, database)
            found = rates(output, test)
            missing = sorted(row for row, key in rows.items() if key not in found)
            if missing:
                raise RuntimeError(f"its output has no rate for {missing}: ...{output[-500:]!r}")
            for key, rate in found.items():
                rec.add(key, rate, f"{count:,} tasks, its {test} test")


def _run(binary: Path, test: str, count: int, database: str) -> str:
    url = make_url(database_url(database))
    env = {
        "DATABASE_USER": url.username or "root",
        "DATABASE_PASSWORD": url.password or "",
        "DATABASE_HOST": f"{url.host or '127.0.0.1'}:{url.port or 3306}",
        "DATABASE_NAME": database,
        "PATH": "/usr/bin:/bin",
    }
    command = [str(binary), "-test_name", test, "-task_count", str(count)]
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{test} did not end within {_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        raise RuntimeError(f"{test} exited {done.returncode}: ...{done.stderr[-500:]!r}")
    return done.stdout


@contextmanager
def _database() -> Iterator[str]:
    """An empty database (it creates its tables itself), dropped afterwards."""
    name = f"th_bench_go_{secrets.token_hex(4)}"
    admin_statement(f"CREATE DATABASE `{name}`")
    try:
        yield name
    finally:
        admin_statement(f"DROP DATABASE IF EXISTS `{name}`")
