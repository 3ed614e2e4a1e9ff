"""Capacity: the highest steady fire rate a ``triggerhook run`` daemon holds.

Steady rates stepped up (default 1,000, 2,000, 4,000, 8,000 and 16,000 fires/s
for 20 s each; ``--capacity-rates``, ``--capacity-step-s``), each step in its own
database and daemon, as in precision: due times at random within each second,
posted ahead through the batch endpoint (done before the first task is armed),
a consumer process receiving every event (persistent, confirmed by the broker).
The CPU meter runs from the first arming (``arm_ahead_ms`` before the first due
time) until the confirmed rows are deleted, so the CPU per 1,000 fires is
firing's cost (arm, publish, confirm, delete), not creating's; at low rates the
daemon's and MariaDB's fixed per-second work (arming passes, lease renewals)
weighs in too.

A step is *held* when all of these are true:

* publish lateness (x-fired-ms - x-due-ms) p99 ≤ 5 ms;
* no event early (x-fired-ms < x-due-ms, or received before due);
* every event received within ``RECEIVE_BOUND_S`` (10 s) after the step's last
  due time;
* the backlog did not grow: the median publish lateness of the events due in
  the step's last quarter exceeds the first quarter's by at most
  ``BACKLOG_GROWTH_MS`` (2 ms). An engine that keeps up is as late at the end
  as at the start; one that falls behind gets later by the second. An event
  not received by the bound counts as late by (bound instant - due), a lower
  bound of its lateness, so a step whose last events never came shows growth.
  Medians, so that one pause in a quarter does not decide it; computed from the
  events alone, so the verdict is deterministic for what was measured.

The tasks are posted ahead, ``LEAD_S`` plus the time posting takes at the
rate the previous step's posting reached (the first step assumes
``POST_TASKS_PER_S``), with a margin. A step whose posting still ended after
its first task was due to be armed (a slow machine, a busy one) is tried again
once with the lead its own posting rate asks for; if that too is late, the
step is *not measured* — the load generator could not stay ahead, which says
nothing of the daemon — and stepping stops there, reporting the highest rate
held before it and why it stopped.

Stepping stops after the first step not held (which is reported too).
Figures: ``capacity.held_fires_per_s`` (the highest rate held, 0 if none) and,
per step, ``capacity.<rate>.`` ``fired_p99``, ``early``, ``missing``,
``backlog_ms`` and ``cpu_{daemon,mariadb,rabbitmq}_per_1k_s``; the lateness
distributions (both measures) of every step.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

import uvloop

from benchmarks.common import (
    CpuMeter,
    Event,
    Place,
    Recorder,
    consume_until,
    consuming,
    daemon_processes,
    isolated,
    record_lateness,
    wait_until,
)
from benchmarks.http import daemon, post_batches
from benchmarks.precision import due_times

RATES = (1_000, 2_000, 4_000, 8_000, 16_000)
STEP_S = 20
QUICK_RATES = (500, 1_000)
QUICK_STEP_S = 2

HELD_P99_MS = 5.0
BACKLOG_GROWTH_MS = 2.0
RECEIVE_BOUND_S = 10
# Posting runs at ~70,000 tasks/s on the reference machine; the first step's
# lead assumes a third of that. Each later step's assumes the rate the last
# posting reached, over POST_MARGIN.
POST_TASKS_PER_S = 25_000
POST_MARGIN = 1.5
LEAD_S = 2.0  # besides posting: encoding the batches, the consumer's start
DRAIN_S = 10.0  # most waited, after the last event, for the rows' deletion
_METERED = {"daemon": "daemon", "MariaDB": "mariadb", "RabbitMQ": "rabbitmq"}


class PostedLate(Exception):
    """The load generator posted a step's tasks too slowly: the first was due
    to be armed before the last was in."""

    def __init__(self, posted_per_s: float, late_ms: float) -> None:
        super().__init__(
            f"posting ended {late_ms:,.0f} ms after the first task was due to be armed "
            f"(posted {posted_per_s:,.0f} tasks/s)"
        )
        self.posted_per_s = posted_per_s


@dataclass(frozen=True)
class Step:
    """What one step measured."""

    fires_per_s: int
    seconds: int
    start_ms: int
    due_ms: list[int]
    events: list[Event]
    cpu: CpuMeter
    rows_left: int
    posted_per_s: float = 0.0  # tasks/s the posting reached (0: not measured)

    @property
    def bound_ms(self) -> int:
        return receive_bound_ms(self.start_ms, self.seconds)


def receive_bound_ms(start_ms: int, seconds: int) -> int:
    """Events not received by then (epoch ms) are missing."""
    return start_ms + (seconds + RECEIVE_BOUND_S) * 1000


def run(rec: Recorder, rates: Sequence[int], seconds: int) -> None:
    """Each rate of ``rates`` (ascending) for ``seconds``, until one is not held."""
    verdicts: dict[int, list[str]] = {}
    unmeasured: dict[int, str] = {}  # the load generator could not keep ahead
    post_per_s = float(POST_TASKS_PER_S)
    for fires_per_s in rates:
        with rec.part(f"{fires_per_s:,} fires/s"):
            step = _step_ahead(fires_per_s, seconds, post_per_s)
            if isinstance(step, PostedLate):
                unmeasured[fires_per_s] = str(step)
                break
            post_per_s = step.posted_per_s
            verdicts[fires_per_s] = _record(rec, step)
        if verdicts.get(fires_per_s, ["failed"]):  # not held, or the step failed
            break
    if rec.errors:
        return  # a step that failed says nothing of the rate held
    held = [rate for rate, why in verdicts.items() if not why]
    steps = "; ".join(
        [
            *(
                f"{rate:,}/s " + ("held" if not why else "not held: " + ", ".join(why))
                for rate, why in verdicts.items()
            ),
            *(
                f"{rate:,}/s not measured: the load generator fell behind ({why})"
                for rate, why in unmeasured.items()
            ),
        ]
    )
    more = ""
    if len(held) == len(rates):
        more = " (every rate tried held: the capacity may be higher)"
    elif unmeasured:
        more = " (stopped where the load generator fell behind: the capacity may be higher)"
    rec.add(
        "capacity.held_fires_per_s",
        max(held, default=0),
        f"{steps}; {seconds} s a step{more}",
    )


def _step_ahead(fires_per_s: int, seconds: int, post_per_s: float) -> Step | PostedLate:
    """The step, posted ahead at ``post_per_s`` (over the margin); if posting
    was late, once more at the rate it reached; still late: why."""
    try:
        return _step(fires_per_s, seconds, post_per_s / POST_MARGIN)
    except PostedLate as late:
        try:
            return _step(fires_per_s, seconds, late.posted_per_s / POST_MARGIN)
        except PostedLate as again:
            return again


def _step(fires_per_s: int, seconds: int, post_per_s: float) -> Step:
    n = fires_per_s * seconds
    with isolated() as place, daemon(place.settings) as running:
        start_ms = int((time.time() + LEAD_S + n / post_per_s) * 1000)
        due_ms = due_times(start_ms, seconds, fires_per_s)
        bound_ms = receive_bound_ms(start_ms, seconds)
        with consuming(place.name, n, consume_until(bound_ms / 1000)) as consumer:
            tasks: list[dict[str, object]] = [{"at": d / 1000, "routing_key": "c"} for d in due_ms]
            posted_per_s = n / uvloop.run(post_batches(running.url, tasks))
            del tasks
            cpu = CpuMeter({**daemon_processes(running.pid), "consumer": consumer.pid})
            first_arming_s = (start_ms - place.settings.arm_ahead_ms) / 1000
            if time.time() > first_arming_s:
                raise PostedLate(posted_per_s, (time.time() - first_arming_s) * 1000)
            time.sleep(max(0.0, first_arming_s - time.time()))  # firing's CPU, not idling's
            cpu.start()
            events: list[Event] = consumer.events(bound_ms / 1000 - time.time() + 60)
            rows_left = rows_left_after(place, DRAIN_S if len(events) == n else 0)
            cpu.stop()
    return Step(fires_per_s, seconds, start_ms, due_ms, events, cpu, rows_left, posted_per_s)


def rows_left_after(place: Place, timeout_s: float) -> int:
    """Rows left once the daemon deleted the confirmed ones (or after ``timeout_s``):
    the deletes are part of each fire's CPU cost."""
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: place.rows() == 0, timeout_s, "rows deleted", step_s=0.05)
    return place.rows()


def _record(rec: Recorder, step: Step) -> list[str]:
    """The step's figures; why it was not held (empty: held)."""
    if not step.events:
        raise RuntimeError(f"no event received in {RECEIVE_BOUND_S} s after the last due time")
    prefix = f"capacity.{step.fires_per_s}"
    record_lateness(rec, prefix, f"capacity {step.fires_per_s:,} fires/s", step.events)
    fired, received = rec.distributions[-2], rec.distributions[-1]
    for measure in ("fired", "received"):  # no plot draws them; a full run's would be big
        del rec.series[f"{prefix}.{measure}"]
    p99_ms, early = fired.stats["p99"], fired.early + received.early
    missing = len(step.due_ms) - len(step.events)
    first_ms, last_ms = quarter_medians_ms(step)
    why = not_held(p99_ms, early, missing, last_ms - first_ms)
    verdict = "not held: " + ", ".join(why) if why else "held"
    rec.add(
        f"{prefix}.fired_p99",
        p99_ms,
        f"{verdict}; {len(step.events):,} of {len(step.due_ms):,} received over "
        f"{step.seconds} s, {step.rows_left:,} rows left at the end; {step.cpu.text()}",
    )
    rec.add(
        f"{prefix}.early",
        early,
        f"{fired.early} with x-fired-ms < x-due-ms, {received.early} received before due",
    )
    rec.add(
        f"{prefix}.missing",
        missing,
        f"of {len(step.due_ms):,}, by {RECEIVE_BOUND_S} s after the last due time",
    )
    rec.add(
        f"{prefix}.backlog_ms",
        last_ms - first_ms,
        f"median x-fired - x-due of the first quarter's due times {first_ms:,.1f} ms, "
        f"of the last's {last_ms:,.1f} ms; grown when > {BACKLOG_GROWTH_MS:.0f} ms",
    )
    _record_cpu(rec, prefix, step)
    return why


def not_held(p99_ms: float, early: int, missing: int, growth_ms: float) -> list[str]:
    """Why a step was not held; empty: held."""
    return [
        reason
        for failed, reason in (
            (p99_ms > HELD_P99_MS, f"p99 {p99_ms:,.1f} ms > {HELD_P99_MS:.0f} ms"),
            (early > 0, f"{early:,} early"),
            (missing > 0, f"{missing:,} not received"),
            (growth_ms > BACKLOG_GROWTH_MS, "backlog grew"),
        )
        if failed
    ]


def _record_cpu(rec: Recorder, prefix: str, step: Step) -> None:
    fires = len(step.events)
    for who, name in _METERED.items():
        if who in step.cpu.used:  # MariaDB and RabbitMQ: when found in /proc
            used_s = step.cpu.used[who]
            rec.add(
                f"{prefix}.cpu_{name}_per_1k_s",
                used_s / fires * 1000,
                f"{used_s:,.2f} CPU-s over {fires:,} fires in {step.cpu.wall_s:,.1f} s",
            )


def quarter_medians_ms(step: Step) -> tuple[float, float]:
    """Median x-fired - x-due of the events due in the step's first and last
    quarters; an event not received counts as late by (bound - due)."""
    quarter_ms = step.seconds * 250
    first_end_ms, last_start_ms = step.start_ms + quarter_ms, step.start_ms + 3 * quarter_ms
    late_ms = [(due, float(fired - due)) for due, fired, _ in step.events]
    missing = Counter(step.due_ms)
    missing.subtract(due for due, _, _ in step.events)
    late_ms += [(due, float(step.bound_ms - due)) for due in missing.elements()]
    first = [ms for due, ms in late_ms if due < first_end_ms]
    last = [ms for due, ms in late_ms if due >= last_start_ms]
    return median(first or [0.0]), median(last or [0.0])  # empty: rates under 4/s
