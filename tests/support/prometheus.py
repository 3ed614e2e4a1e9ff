"""A real Prometheus (Debian's ``prometheus``) for the tests, and Grafana's
PromQL macros.

* :class:`PrometheusServer`: one ``prometheus`` process of the test's own
  (config and data in a temporary directory, a free port), scraping the given
  targets' ``/metrics`` every second; stopped (SIGTERM, then SIGKILL) on exit.
  Queried through its HTTP API (:meth:`~PrometheusServer.query`,
  :meth:`~PrometheusServer.query_range`, :meth:`~PrometheusServer.label_values`).
* :func:`render_promql`: a dashboard query as Grafana's Prometheus data source
  sends it (``$__rate_interval``, ``$__interval``, ``$__range``, variables).
* :func:`regex_value`: a multi-value variable inside ``=~"..."``.

Only the process started here is ever signalled, by its own pid.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from support.daemon import closed_port
from support.waiting import wait_for

PROMETHEUS = "/usr/bin/prometheus"
SCRAPE_INTERVAL_S = 1
_START_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 10.0

ALL = "$__all"
# What Grafana's Prometheus data source escapes in a regex variable value; the
# backslash is doubled, as the value sits in a PromQL string literal.
_REGEX_SPECIAL = re.compile(r"[\\^$.*+?()\[\]{}|']")
_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)\]\]")


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    values: list[float]  # NaN where PromQL answered NaN

    def has_number(self) -> bool:
        return any(not math.isnan(v) for v in self.values)


class PrometheusServer:
    """``with PrometheusServer(["127.0.0.1:8080"], token=...) as server: ...``"""

    def __init__(self, targets: Sequence[str], token: str | None = None) -> None:
        self._targets = list(targets)
        self._token = token
        self._dir = Path(tempfile.mkdtemp(prefix="th-prometheus-"))
        self.port = closed_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = self._dir / "prometheus.log"

    def config(self) -> str:
        """The configuration: one job scraping the targets every second."""
        auth = f"    authorization: {{credentials: {self._token}}}\n" if self._token else ""
        targets = ", ".join(f'"{t}"' for t in self._targets)
        return (
            f"global: {{scrape_interval: {SCRAPE_INTERVAL_S}s, evaluation_interval: 1s}}\n"
            "scrape_configs:\n"
            "  - job_name: triggerhook\n"
            f"    scrape_timeout: {SCRAPE_INTERVAL_S}s\n"
            f"{auth}"
            f"    static_configs: [{{targets: [{targets}]}}]\n"
        )

    def start(self) -> Self:
        executable = shutil.which("prometheus") or PROMETHEUS
        if not Path(executable).exists():
            raise AssertionError(
                "prometheus is missing: scripts/test installs it (ensure_prometheus in "
                "scripts/_services.sh), or apt-get install prometheus"
            )
        (self._dir / "prometheus.yml").write_text(self.config(), encoding="utf-8")
        with self._log.open("wb") as log:
            self._proc = subprocess.Popen(
                [
                    executable,
                    f"--config.file={self._dir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self._dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_for(self._ready, _START_TIMEOUT_S, lambda: f"prometheus not ready\n{self.log()}")
        return self

    def _ready(self) -> bool:
        assert self._proc is not None
        if self._proc.poll() is not None:
            raise AssertionError(f"prometheus exited ({self._proc.returncode})\n{self.log()}")
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def log(self) -> str:
        return self._log.read_text(errors="replace")[-4000:] if self._log.exists() else ""

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(_STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait(_STOP_TIMEOUT_S)
            self._proc = None
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the HTTP API ---------------------------------------------------------------

    def _get(self, path: str, params: Mapping[str, Any]) -> Any:
        answer = httpx.get(f"{self.url}{path}", params=dict(params), timeout=10)
        body = answer.json()
        if answer.status_code != 200 or body.get("status") != "success":
            raise AssertionError(f"{path} {dict(params)}: {answer.status_code} {body}")
        return body["data"]

    def query(self, expr: str, at_s: float | None = None) -> list[Series]:
        """An instant query (at ``at_s``, epoch seconds; default now)."""
        params: dict[str, Any] = {"query": expr}
        if at_s is not None:
            params["time"] = f"{at_s:.3f}"
        data = self._get("/api/v1/query", params)
        if data["resultType"] == "scalar":
            return [Series({}, [float(data["result"][1])])]
        return [Series(r["metric"], [float(r["value"][1])]) for r in data["result"]]

    def query_range(self, expr: str, start_s: float, end_s: float, step_s: float) -> list[Series]:
        params = {"query": expr, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "step": step_s}
        data = self._get("/api/v1/query_range", params)
        return [Series(r["metric"], [float(v) for _, v in r["values"]]) for r in data["result"]]

    def value(self, expr: str) -> float:
        """The largest value of an instant query; 0 when it has no series."""
        return max((s.values[0] for s in self.query(expr)), default=0.0)

    def label_values(self, label: str, match: str) -> list[str]:
        """What Grafana's ``label_values(<match>, <label>)`` lists."""
        return sorted(self._get(f"/api/v1/label/{label}/values", {"match[]": match}))

    def targets_up(self) -> bool:
        active = self._get("/api/v1/targets", {"state": "active"})["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)


# -- Grafana's macros ------------------------------------------------------------------


def rate_interval_s(interval_s: int, scrape_interval_s: int) -> int:
    """Grafana's ``$__rate_interval``: max(interval + scrape interval, 4 scrape intervals)."""
    return max(interval_s + scrape_interval_s, 4 * scrape_interval_s)


def regex_value(values: Sequence[str], all_value: str) -> str:
    """A multi-value variable in ``=~"..."``, as Grafana formats it for Prometheus."""
    if list(values) == [ALL]:
        return all_value
    escaped = [_REGEX_SPECIAL.sub(lambda m: "\\\\" + m.group(0), v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def render_promql(
    expr: str, variables: Mapping[str, str], interval_s: int, range_s: int, scrape_interval_s: int
) -> str:
    """``expr`` with Grafana's macros and the variables substituted; an unknown
    variable is an error (Grafana would send it as is, and PromQL reject it)."""
    replacements = {
        "__rate_interval": f"{rate_interval_s(interval_s, scrape_interval_s)}s",
        "__interval": f"{interval_s}s",
        "__range": f"{range_s}s",
        **variables,
    }

    def replace(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group is not None)
        if name not in replacements:
            raise ValueError(f"unknown variable {match.group(0)!r} in {expr}")
        return replacements[name]

    return _VARIABLE.sub(replace, expr)
