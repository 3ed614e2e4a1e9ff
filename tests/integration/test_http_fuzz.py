"""Schema-driven fuzzing of the HTTP API with Schemathesis, against a real daemon.

Schemathesis reads the daemon's own ``/openapi.json`` and sends valid and
invalid requests for every operation (boundary values, wrong types, unknown
fields, stateful create -> get -> patch -> delete sequences). Every check it
has must pass: no 5xx, status codes, content types and bodies as documented,
invalid requests rejected and valid ones accepted — the document matches the
behaviour. Afterwards the daemon must still be ready and have logged no
traceback.

tests/support/schemathesis_cli.py runs it; its one hook fills in, for positive
cases, what no schema can state: a real ``cursor`` for ``GET /v1/tasks`` (an
opaque value), and a series' bounds that depend on the time (``until`` at the
end of time, a cron series' ``at`` before its last 50 years). It also draws
cron expressions from a grammar (the document's ``format: cron``), filtered by
the document's pattern, that match a date.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.http import Api, api_daemon

TOKEN = "fuzz-token"
# Fixed seed: a failure reproduces; change it to explore other cases.
SEED = 20261130


@pytest.fixture(scope="module")
def api(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    # Fuzzed tasks go to the unbound default routing key, and many are due at
    # once (any past time): their events are returned and retried. With no
    # age limit they stay stored for the run (instead of being dead-lettered
    # and deleted at once), so "a created task can be read back" holds. A task
    # found late by its own late-fire policy is dead-lettered at once: with no
    # dead-letter queue declared, its dead letter is returned and retried too.
    with api_daemon(
        mysql_url, amqp_url, api_token=TOKEN, publish_max_age_ms=0, dead_letter_queue=""
    ) as served:
        yield served


ST = Path(__file__).parents[1] / "support" / "schemathesis_cli.py"


def schemathesis(api: Api, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-P",  # not tests/support first on sys.path: its http.py would shadow the stdlib's
            str(ST),
            "run",
            f"{api.url}/openapi.json",
            "--checks",
            "all",
            "--seed",
            str(SEED),
            "--workers",
            "2",
            "--output-sanitize",
            "false",
            "--report-dir",
            str(tmp_path),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tmp_path,
    )


def test_every_documented_operation_survives_fuzzing(api: Api, tmp_path: Path) -> None:
    auth = ("--header", f"Authorization: Bearer {TOKEN}")
    result = schemathesis(api, tmp_path, "--max-examples", "100", *auth)
    lines = api.daemon.lines
    problems = [n for n, ln in enumerate(lines) if " ERROR " in ln or "Traceback" in ln]
    assert problems == [], "\n".join(lines[problems[0] : problems[0] + 60])
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "generated" in result.stdout  # it really ran test cases
    with api.client() as client:
        assert client.get("/readyz").status_code == 200


def test_fuzzing_without_the_token_only_ever_gets_401_on_v1(api: Api, tmp_path: Path) -> None:
    result = schemathesis(api, tmp_path, "--max-examples", "20", "--phases", "fuzzing")
    # ignored_auth passes: every /v1 request without credentials is refused.
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert httpx.get(f"{api.url}/readyz").status_code == 200
    assert api.daemon.count("Traceback") == 0, api.daemon.tail()
