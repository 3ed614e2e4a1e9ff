"""Finding and bulk-cancelling tasks at scale (issue 14), through a
``triggerhook run`` daemon's HTTP API:

* at ``pending`` (1,000,000) pending tasks due over the next 30 days (10
  routing keys; 1,000 customers, each with a tag ``customer:N`` and an id
  prefix ``cN:``), each request made ``REPEATS`` times one after another:
  ``listing.page_*``   a page of 100: the first, one deep in due order (by
                       ``due_after``), by routing key (100,000 match), by tag
                       (1,000 match), by id prefix (1,000 match), and the
                       10th page of a walk by cursor;
  ``listing.count_*``  counts by tag, by routing key, and of everything, and
                       a capped one (``up_to=1000``: it reads 1,000);
  ``listing.firing_none`` the first page of ``state=firing`` with nothing
                       armed (the armed ranges only: no row read);
  ``listing.timeline_*`` counts per routing key: the next hour by minute
                       (what the web view shows), and all 30 days by hour
                       (every row read);
* ``listing.cancel.*``: a bulk cancel of ``cancel_n`` (100,000) tagged tasks
  while 1,000 tasks/s fire; the firing lateness (x-fired-ms - x-due-ms) of
  the events due while the cancel ran, and the cancel's rate.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx
import uvloop

from benchmarks.common import Recorder, consuming, isolated, record_lateness, summary
from benchmarks.http import daemon, post_batches

REPEATS = 30
CUSTOMERS = 1000
KEYS = 10
DAY_MS = 86_400_000


def run(rec: Recorder, pending: int, cancel_n: int, fire_s: int) -> None:
    with rec.part("queries"):
        _queries(rec, pending)
    with rec.part("bulk cancel"):
        _bulk_cancel(rec, cancel_n, fire_s)


def _fill(url: str, pending: int, start_ms: int) -> None:
    rng = random.Random(14)
    tasks: list[dict[str, object]] = [
        {
            "id": f"c{i % CUSTOMERS}:{i}",
            "at": (start_ms + rng.randrange(30 * DAY_MS)) / 1000,
            "routing_key": f"rk.{i % KEYS}",
            "tags": [f"customer:{i % CUSTOMERS}"],
        }
        for i in range(pending)
    ]
    uvloop.run(post_batches(url, tasks, in_flight=2))


def _timed(http: httpx.Client, path: str, params: dict[str, str]) -> tuple[float, Any]:
    started = time.perf_counter()
    answer = http.get(path, params=params)
    elapsed_ms = (time.perf_counter() - started) * 1000
    if answer.status_code != 200:
        raise RuntimeError(f"{path} {params} answered {answer.status_code}: {answer.text}")
    return elapsed_ms, answer.json()


def _measure(
    rec: Recorder,
    key: str,
    what: str,
    call: Callable[[], tuple[float, Any]],
    check: Callable[[Any], bool],
) -> None:
    latencies: list[float] = []
    for _ in range(REPEATS):
        elapsed_ms, data = call()
        if not check(data):
            raise RuntimeError(f"{key}: unexpected answer {str(data)[:200]}")
        latencies.append(elapsed_ms)
    stats = summary(sorted(latencies))
    rec.add(
        key,
        stats["p50"],
        f"{what}; median of {REPEATS} one after another, p99 {stats['p99']:.1f} ms",
    )


def _queries(rec: Recorder, pending: int) -> None:
    with isolated() as place, daemon(place.settings) as running:
        start_ms = int(time.time() * 1000) + 3_600_000  # nothing fires during the run
        filled_s = time.perf_counter()
        _fill(running.url, pending, start_ms)
        rec.add("listing.fill_rate", pending / (time.perf_counter() - filled_s), "tasks/s")
        with httpx.Client(base_url=running.url, timeout=120) as http:
            _pages(rec, http, pending, start_ms)
            _counts(rec, http, pending, start_ms)


def _pages(rec: Recorder, http: httpx.Client, pending: int, start_ms: int) -> None:
    def page(params: dict[str, str]) -> Callable[[], tuple[float, Any]]:
        return lambda: _timed(http, "/v1/tasks", {"limit": "100", **params})

    def full(data: Any) -> bool:
        return len(data["tasks"]) == 100

    def of_one_customer(data: Any) -> bool:  # a tag's or a prefix's: fewer in quick mode
        return len(data["tasks"]) == min(100, pending // CUSTOMERS)

    of = f"of {pending:,} pending"
    _measure(rec, "listing.page_first", f"the first page of 100 {of}", page({}), full)
    deep = str((start_ms + 15 * DAY_MS) / 1000)
    _measure(
        rec, "listing.page_deep", "a page half-way (due_after)", page({"due_after": deep}), full
    )
    _measure(
        rec, "listing.page_key", "a routing key's first page", page({"routing_key": "rk.3"}), full
    )
    _measure(
        rec, "listing.page_tag", "a tag's first page", page({"tag": "customer:7"}), of_one_customer
    )
    _measure(
        rec,
        "listing.page_prefix",
        "an id prefix's first page",
        page({"prefix": "c7:"}),
        of_one_customer,
    )

    def tenth_page() -> tuple[float, Any]:
        """The time of the 10th request of a walk (each page after the last's cursor)."""
        cursor: str | None = None
        for _ in range(10):
            params = {"limit": "100", **({"cursor": cursor} if cursor else {})}
            elapsed_ms, data = _timed(http, "/v1/tasks", params)
            cursor = data["next_cursor"]
        return elapsed_ms, data

    _measure(rec, "listing.page_cursor", "the 10th page of a walk by cursor", tenth_page, full)


def _counts(rec: Recorder, http: httpx.Client, pending: int, start_ms: int) -> None:
    def count(params: dict[str, str]) -> Callable[[], tuple[float, Any]]:
        return lambda: _timed(http, "/v1/tasks/count", params)

    per_customer = pending // CUSTOMERS
    _measure(
        rec,
        "listing.count_tag",
        f"count of a tag ({per_customer:,})",
        count({"tag": "customer:7"}),
        lambda d: d["count"] == per_customer,
    )
    per_key = pending // KEYS
    _measure(
        rec,
        "listing.count_key",
        f"count of a routing key ({per_key:,})",
        count({"routing_key": "rk.3"}),
        lambda d: d["count"] == per_key,
    )
    _measure(
        rec,
        "listing.count_all",
        f"count of all ({pending:,})",
        count({}),
        lambda d: d["count"] == pending,
    )
    _measure(
        rec,
        "listing.count_up_to",
        f"count of all up to 1,000 (of {pending:,})",
        count({"up_to": "1000"}),
        lambda d: d == {"count": 1000, "at_least": True},
    )
    _measure(
        rec,
        "listing.firing_none",
        f"first page of state=firing, nothing armed ({pending:,} stored)",
        lambda: _timed(http, "/v1/tasks", {"state": "firing", "limit": "1"}),
        lambda d: d["tasks"] == [],
    )
    start = str(start_ms // 1000)

    def line(bucket: str, buckets: str) -> Callable[[], tuple[float, Any]]:
        params = {"start": start, "bucket": bucket, "buckets": buckets}
        return lambda: _timed(http, "/v1/tasks/timeline", params)

    _measure(
        rec,
        "listing.timeline_hour",
        "counts per routing key, next hour by minute",
        line("60", "60"),
        lambda d: len(d["routing_keys"]) == KEYS,
    )
    _measure(
        rec,
        "listing.timeline_month",
        f"counts per routing key, 30 days by hour ({pending:,} read)",
        line("3600", "720"),
        lambda d: sum(sum(c) for c in d["routing_keys"].values()) == pending,
    )


def _bulk_cancel(rec: Recorder, cancel_n: int, fire_s: int) -> None:
    with isolated() as place, daemon(place.settings) as running:
        now_ms = int(time.time() * 1000)
        bulk: list[dict[str, object]] = [
            {"id": f"bulk:{i}", "at": (now_ms + DAY_MS + i) / 1000, "tags": ["bulk"]}
            for i in range(cancel_n)
        ]
        uvloop.run(post_batches(running.url, bulk))
        start_ms = int(time.time() * 1000) + 5000
        rng = random.Random(2)
        steady = [
            {"at": (start_ms + s * 1000 + rng.randrange(1000)) / 1000, "routing_key": "steady"}
            for s in range(fire_s)
            for _ in range(1000)
        ]
        uvloop.run(post_batches(running.url, steady))
        with (
            consuming(place.name, len(steady)) as consumer,
            httpx.Client(base_url=running.url, timeout=600) as http,
        ):
            while time.time() * 1000 < start_ms + 3000:  # firing for 3 s first
                time.sleep(0.05)
            began_ms = time.time() * 1000
            done = http.post("/v1/tasks/cancel", json={"tag": "bulk"}).json()
            ended_ms = time.time() * 1000
            events = consumer.events(fire_s + 120)
    if done != {"cancelled": cancel_n, "too_late": 0, "next_cursor": None}:
        raise RuntimeError(f"the bulk cancel answered {done}")
    during = [e for e in events if began_ms <= e[0] <= ended_ms]
    record_lateness(rec, "listing.cancel", "firing during a bulk cancel", during)
    fired = rec.distributions[-2]
    seconds = (ended_ms - began_ms) / 1000
    rec.add(
        "listing.cancel.fired_p99",
        fired.stats["p99"],
        f"{len(during):,} events due during the {seconds:.1f} s cancel of {cancel_n:,} tasks "
        f"(1,000 fires/s); p50 {fired.stats['p50']:.1f}, max {fired.stats['max']:.1f} ms",
    )
    rec.add("listing.cancel.rate", cancel_n / seconds, f"{cancel_n:,} cancelled in {seconds:.1f} s")
    rec.add("listing.cancel.early", fired.early, "events fired before due")
    before = [e for e in events if e[0] < began_ms]
    if before:
        rec.add(
            "listing.cancel.before_p99",
            statistics.quantiles([float(f - d) for d, f, _ in before], n=100)[98],
            f"the same firing before the cancel ({len(before):,} events)",
        )
