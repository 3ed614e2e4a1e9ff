"""A backlog drained under a rate limit (issue 32), through a ``triggerhook
run`` daemon: N tasks on one routing key all due at the same instant (the
backlog an outage leaves: overdue at once), the key limited to R/s
(``rate_limits``), while another key fires a steady 1,000/s. Twice, each in
its own database and daemon: the steady key alone, then with the backlog.

Figures: the rate the backlog left at, after its burst (the events past the
first second's, over the time they took, by x-fired-ms), against the limit;
the steady key's lateness p50/p99 alone and beside the backlog (x-fired-ms -
x-due-ms); events early in either run. The two keys' events are told apart
by due time: the backlog's are all due at one instant, before any steady one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import uvloop

from benchmarks.common import Event, Recorder, consuming, isolated, record_lateness
from benchmarks.http import daemon, post_batches
from benchmarks.precision import due_times

LIMITED, STEADY = "bench.limited", "bench.steady"


@dataclass(frozen=True)
class Sizes:
    backlog: int  # tasks due at one instant on the limited key
    limit_per_s: int
    steady_s: int  # seconds of the steady key
    steady_per_s: int = 1000


FULL = Sizes(backlog=100_000, limit_per_s=5_000, steady_s=25)
QUICK = Sizes(backlog=2_000, limit_per_s=1_000, steady_s=3)


def run(rec: Recorder, sizes: Sizes) -> None:
    runs: dict[str, Outcome] = {}
    with rec.part("the steady key alone"):
        runs["alone"] = _once(sizes, backlog=False)
    with rec.part("the steady key beside a limited backlog"):
        runs["beside"] = _once(sizes, backlog=True)
    with rec.part("the figures"):  # a run that failed has none: said so
        _record(rec, sizes, runs["alone"], runs["beside"])


@dataclass(frozen=True)
class Outcome:
    steady: list[Event]
    backlog: list[Event]


def _once(sizes: Sizes, backlog: bool) -> Outcome:
    extra = {"rate_limits": f"{LIMITED}={sizes.limit_per_s}/s"}
    n_backlog = sizes.backlog if backlog else 0
    n_steady = sizes.steady_s * sizes.steady_per_s
    with isolated() as place, daemon(place.settings, extra) as running:
        # Far enough ahead that every batch is in before the first is due.
        start_ms = int(time.time() * 1000) + 5000 + (n_backlog + n_steady) // 20
        steady = due_times(start_ms + 1000, sizes.steady_s, sizes.steady_per_s)
        tasks: list[dict[str, object]] = [
            {"at_ms": due_ms, "routing_key": STEADY} for due_ms in steady
        ]
        tasks += [{"at_ms": start_ms, "routing_key": LIMITED} for _ in range(n_backlog)]
        uvloop.run(post_batches(running.url, tasks))
        drain_s = n_backlog / sizes.limit_per_s
        with consuming(place.name, len(tasks)) as consumer:
            wait_s = max(drain_s, sizes.steady_s + 1) + 60 + (start_ms / 1000 - time.time())
            events = consumer.events(wait_s)
    return Outcome(
        steady=[e for e in events if e[0] > start_ms],
        backlog=[e for e in events if e[0] == start_ms],
    )


def _record(rec: Recorder, sizes: Sizes, alone: Outcome, beside: Outcome) -> None:
    record_lateness(rec, "throttle.alone", "steady 1,000/s alone", alone.steady)
    alone_fired = rec.distributions[-2]
    record_lateness(rec, "throttle.beside", "steady 1,000/s beside the backlog", beside.steady)
    beside_fired = rec.distributions[-2]
    fired = sorted(e[1] for e in beside.backlog)
    burst = sizes.limit_per_s  # one second's tokens go at once
    if len(fired) != sizes.backlog:
        raise RuntimeError(f"{len(fired):,} of the {sizes.backlog:,} backlog events arrived")
    took_ms = fired[-1] - fired[burst - 1]
    rate = (len(fired) - burst) / (took_ms / 1000) if took_ms > 0 else float("inf")
    rec.add(
        "throttle.drain_rate",
        rate,
        f"{sizes.backlog:,} due at once, limited to {sizes.limit_per_s:,}/s: the "
        f"{len(fired) - burst:,} past the burst left over {took_ms / 1000:.2f} s",
    )
    rec.add(
        "throttle.drain_error",
        abs(rate / sizes.limit_per_s - 1),
        f"{rate / sizes.limit_per_s:.4f} of the limit",
    )
    alone_p99, beside_p99 = alone_fired.stats["p99"], beside_fired.stats["p99"]
    rec.add("throttle.alone_p99", alone_p99, f"{len(alone.steady):,} events")
    rec.add("throttle.beside_p99", beside_p99, f"{len(beside.steady):,} events")
    rec.add("throttle.p99_added_ms", beside_p99 - alone_p99)
    early = sum(1 for o in (alone, beside) for e in o.steady + o.backlog if e[1] < e[0])
    rec.add("throttle.early", early, "events with x-fired-ms < x-due-ms, both runs")
