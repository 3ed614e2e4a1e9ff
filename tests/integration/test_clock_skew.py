"""A daemon whose host clock is wrong still fires by the true (the database's) time.

Real processes: ``triggerhook run`` under libfaketime (``LD_PRELOAD``) with its
wall clock ``SKEW_S`` seconds fast and its monotonic clock left alone, while
MariaDB, RabbitMQ and this test keep the true time (they share this host's
clock). The test schedules tasks through the daemon's HTTP API, absolute due
times (``at``) from its own clock and a few relative ones (``delay``), and
stamps every event with its own clock on receipt. Nothing may arrive before
its due time by that clock (no tolerance), none may be lost or duplicated,
and none may be far late (a ``delay`` turned into a due time by the fast host
clock would be ``SKEW_S`` late, fired by a true clock).

The events are consumed from before the first due time on, so a receipt
stamp is at most a few milliseconds after the event's arrival: an early event
is seen early.

libfaketime is Debian's ``libfaketime`` package; scripts/test installs it
(``ensure_libfaketime`` in scripts/_services.sh). Without it the tests fail.
"""

from __future__ import annotations

import glob
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from support.amqp import AmqpNames, EventConsumer, Received
from support.daemon import (
    Daemon,
    DaemonGroup,
    OwnerSampler,
    TaskTable,
    collect_ids,
    daemon_env,
    report,
    spread,
)
from support.hook import header_int
from support.ownership import SHARD_COUNT, balanced
from support.waiting import now_ms, wait_for

SKEW_S = 20  # the skewed daemon's wall clock is this far ahead of the true time
LIBFAKETIME_GLOBS = (
    "/usr/lib/*/faketime/libfaketime.so.1",  # Debian's multiarch path
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)
FIRST_DUE_MS = 3000  # "at" tasks are due 3-6 s after the test's clock at scheduling
LAST_DUE_MS = 6000
DELAYS_S = (3.0, 3.5, 4.0, 4.5, 5.0)  # "delay" tasks, per daemon
LATE_BOUND_MS = 5000  # every event within this after its due time (SKEW_S would be far past)
DUE_SLACK_MS = 1000  # a "delay" task's due time against the test's clock around the request
# Daemon log lines of a lost broker connection (support for the failure message).
BROKER_TROUBLE = ("RabbitMQ connection closed", "cannot connect to RabbitMQ", "republishing")
QUIET_S = 3.0  # after the last expected event: longer than the shard lease (2 s), for duplicates


def libfaketime() -> str:
    """The libfaketime library's path; fails the test (not skipped) when absent."""
    for pattern in LIBFAKETIME_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    pytest.fail(
        f"libfaketime is not installed (none of {', '.join(LIBFAKETIME_GLOBS)}): scripts/test "
        "installs it (ensure_libfaketime in scripts/_services.sh), or: apt-get install libfaketime"
    )


def skewed(env: Mapping[str, str], skew_s: int = SKEW_S) -> dict[str, str]:
    """``env`` for a process whose wall clock is ``skew_s`` fast (monotonic true)."""
    preload = [libfaketime(), *filter(None, env.get("LD_PRELOAD", "").split(":"))]
    return {
        **env,
        "LD_PRELOAD": ":".join(preload),
        "FAKETIME": f"{skew_s:+d}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_NO_CACHE": "1",
    }


def assert_clock_skewed(env: Mapping[str, str], skew_s: int = SKEW_S) -> None:
    """A Python process with ``env`` sees the wall clock ``skew_s`` ahead of ours
    and the monotonic clock as we do (so the tests cannot pass vacuously)."""
    code = "import json, time; print(json.dumps([time.time(), time.monotonic()]))"
    before_wall, before_mono = time.time(), time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    after_wall, after_mono = time.time(), time.monotonic()
    assert done.returncode == 0, done.stderr
    wall, mono = json.loads(done.stdout)
    slack = 0.5
    assert before_wall + skew_s - slack <= wall <= after_wall + skew_s + slack, (
        f"libfaketime did not skew the wall clock by {skew_s}s: the child saw "
        f"{wall - (before_wall + after_wall) / 2:+.3f}s (LD_PRELOAD={env.get('LD_PRELOAD')})"
    )
    assert before_mono - slack <= mono <= after_mono + slack, (
        f"the child's monotonic clock is off by {mono - (before_mono + after_mono) / 2:+.3f}s "
        "(FAKETIME_DONT_FAKE_MONOTONIC not honoured?)"
    )


def assert_preloaded(daemon: Daemon) -> None:
    """The daemon process really has libfaketime mapped."""
    maps = Path(f"/proc/{daemon.pid}/maps").read_text()
    assert "libfaketime" in maps, f"{daemon.name} runs without libfaketime\n{daemon.tail()}"


def api_url(daemon: Daemon) -> str:
    return f"http://127.0.0.1:{daemon.env['TRIGGERHOOK_HTTP_PORT']}"


@dataclass(frozen=True)
class Delayed:
    """A task sent with ``delay``, and the test's clock around its request."""

    task_id: str
    delay_ms: int
    sent_ms: int  # just before the request
    answered_ms: int  # just after the answer


@dataclass
class Scheduled:
    at: dict[str, int]  # id -> due time (epoch ms, the test's clock) of the "at" tasks
    delayed: dict[str, Delayed]
    done_ms: int  # the test's clock when every request was answered

    def ids(self) -> list[str]:
        return [*self.at, *self.delayed]


def schedule(urls: Sequence[str], prefix: str, count: int) -> Scheduled:
    """``count`` "at" tasks due ``FIRST_DUE_MS``-``LAST_DUE_MS`` from now, split over
    the daemons (one batch each), then ``DELAYS_S`` "delay" tasks through each."""
    start = now_ms()
    tasks = spread(f"{prefix}-at", count, start + FIRST_DUE_MS, start + LAST_DUE_MS)
    delayed: dict[str, Delayed] = {}
    for index, url in enumerate(urls):
        with httpx.Client(base_url=url, timeout=30.0) as http:
            mine = tasks[index :: len(urls)]
            body = {"tasks": [{"id": task_id, "at": due / 1000} for task_id, due in mine]}
            answer = http.post("/v1/tasks/batch", json=body)
            assert answer.status_code == 201, (url, answer.text)
            made = {"ids": [task_id for task_id, _ in mine], "outcomes": ["created"] * len(mine)}
            assert answer.json() == made
            for number, delay_s in enumerate(DELAYS_S):
                task_id = f"{prefix}-delay-{index}-{number}"
                sent_ms = now_ms()
                answer = http.post("/v1/tasks", json={"id": task_id, "delay": delay_s})
                answered_ms = now_ms()
                assert answer.status_code == 201, (url, answer.text)
                delayed[task_id] = Delayed(task_id, int(delay_s * 1000), sent_ms, answered_ms)
    done_ms = now_ms()
    # The consumer starts right after this: an event that arrived meanwhile is
    # stamped now, still before every due time, so an early one is still seen.
    assert done_ms < start + FIRST_DUE_MS - 500, (
        f"scheduling took {done_ms - start} ms: too slow for the receipt times to show "
        "early events (the first task is due 3 s after it started)"
    )
    return Scheduled(dict(tasks), delayed, done_ms)


def spread_ms(values: Sequence[int]) -> str:
    if not values:
        return "none"
    return f"median {statistics.median(values):.0f} ms, max {max(values)} ms"


def completeness(expected: Sequence[str], events: Sequence[Received]) -> list[str]:
    """Tasks lost, fired twice, or never scheduled."""
    problems: list[str] = []
    counts = Counter(e.message_id or "" for e in events)
    missing = sorted(set(expected) - set(counts))
    extra = {k: n - 1 for k, n in counts.items() if n > 1}
    unknown = sorted(set(counts) - set(expected))
    if missing:
        problems.append(f"{len(missing)} of {len(expected)} tasks never fired, e.g. {missing[:5]}")
    if extra:
        problems.append(f"{sum(extra.values())} duplicate events, e.g. {sorted(extra)[:5]}")
    if unknown:
        problems.append(f"{len(unknown)} events for tasks never scheduled: {unknown[:5]}")
    return problems


@dataclass
class Timing:
    """Every received event's times against the test's (true) clock."""

    # "at" / "delay" -> (ms early, id) of the events received before their time
    early: dict[str, list[tuple[int, str]]] = field(default_factory=lambda: {"at": [], "delay": []})
    lateness: list[int] = field(default_factory=list)  # receipt - due, ms
    wrong_due: list[str] = field(default_factory=list)
    fired_before_due: list[str] = field(default_factory=list)

    def add(self, scheduled: Scheduled, event: Received) -> None:
        task_id = event.message_id or ""
        due_header = header_int(event, "x-due-ms")
        if header_int(event, "x-fired-ms") < due_header:
            self.fired_before_due.append(task_id)
        if task_id in scheduled.at:
            kind, due = "at", scheduled.at[task_id]
            not_before = due
            if due_header != due:
                self.wrong_due.append(f"{task_id}: x-due-ms {due_header - due:+d} ms off")
        elif task_id in scheduled.delayed:
            sent = scheduled.delayed[task_id]
            low, high = sent.sent_ms + sent.delay_ms, sent.answered_ms + sent.delay_ms
            if not low - DUE_SLACK_MS <= due_header <= high + DUE_SLACK_MS:
                self.wrong_due.append(
                    f"{task_id}: x-due-ms {due_header - low:+d} ms from request + delay"
                )
            # Never before the request's start + delay, nor before its own due time.
            kind, due, not_before = "delay", due_header, max(low, due_header)
        else:
            return  # reported by completeness()
        if event.received_ms < not_before:
            self.early[kind].append((not_before - event.received_ms, task_id))
        self.lateness.append(event.received_ms - due)

    def problems(self, scheduled: Scheduled) -> list[str]:
        found: list[str] = []
        totals = {"at": len(scheduled.at), "delay": len(scheduled.delayed)}
        against = {"at": "their due time", "delay": "request + delay or their x-due-ms"}
        for kind, found_early in self.early.items():
            if found_early:
                early = sorted(found_early, reverse=True)
                found.append(
                    f"{len(early)} of {totals[kind]} {kind!r} tasks received EARLY by the true "
                    f"clock (before {against[kind]}): by {spread_ms([ms for ms, _ in early])} "
                    f"(e.g. {[i for _, i in early[:3]]})"
                )
        too_late = [ms for ms in self.lateness if ms > LATE_BOUND_MS]
        if too_late:
            found.append(
                f"{len(too_late)} tasks received more than {LATE_BOUND_MS} ms after their "
                f"due time: {spread_ms(too_late)}"
            )
        if self.wrong_due:
            found.append(
                f"{len(self.wrong_due)} events with a wrong x-due-ms, e.g. {self.wrong_due[:3]}"
            )
        if self.fired_before_due:
            found.append(
                f"{len(self.fired_before_due)} events with x-fired-ms < x-due-ms, "
                f"e.g. {self.fired_before_due[:3]}"
            )
        return found


def findings(scheduled: Scheduled, events: Sequence[Received]) -> list[str]:
    """Everything wrong with the events received for ``scheduled`` (empty: all good)."""
    expected = scheduled.ids()
    timing = Timing()
    for event in events:
        timing.add(scheduled, event)
    problems = completeness(expected, events) + timing.problems(scheduled)
    on_time = [ms for ms in timing.lateness if ms >= 0]
    report(
        f"clock skew {SKEW_S:+d}s: {len(events)} events for {len(expected)} tasks; lateness "
        f"by the true clock of those not early: {spread_ms(on_time)}; "
        + ("; ".join(problems) if problems else "all good")
    )
    return problems


def published(daemon: Daemon) -> int:
    """Events the daemon published (its /v1/status totals)."""
    with httpx.Client(base_url=api_url(daemon), timeout=10.0) as http:
        answer = http.get("/v1/status")
    assert answer.status_code == 200, answer.text
    return int(answer.json()["totals"]["published"])


def share_the_shards(table: TaskTable, daemons: Sequence[Daemon]) -> None:
    """Wait until the daemons (named as their instances) hold every shard fairly,
    so each fires its part of the tasks from the start."""
    names = [d.name for d in daemons]

    def shared() -> bool:
        return balanced({s: o for s, (o, _, _) in table.shards().items()}, names)

    wait_for(shared, 20, lambda: f"shards not shared by {names}: {table.owner_counts()}")
    assert sum(table.owner_counts().values()) == SHARD_COUNT


def fire_and_check(
    consumer: EventConsumer,
    table: TaskTable,
    database_url: str,
    daemons: Sequence[Daemon],
    prefix: str,
    count: int,
) -> None:
    share_the_shards(table, daemons)
    with OwnerSampler(database_url, interval_s=0.02) as owners:
        scheduled = schedule([api_url(d) for d in daemons], prefix, count)
        last_due_ms = max(*scheduled.at.values(), scheduled.done_ms + int(max(DELAYS_S) * 1000))
        timeout_s = (last_due_ms - now_ms()) / 1000 + LATE_BOUND_MS / 1000 + 5
        events = collect_ids(consumer, scheduled.ids(), timeout_s=timeout_s, quiet_s=QUIET_S)
    fired = {d.name: published(d) for d in daemons}
    report(f"shards were held by {sorted(owners.seen)}; events published: {fired}")
    problems = findings(scheduled, events)
    # Else the fast clock was never put to the test.
    if "fast" not in owners.seen:
        problems.append(f"the fast-clock daemon never held a shard (owners: {owners.seen})")
    if not fired.get("fast"):
        problems.append(f"the fast-clock daemon published nothing: {fired}")
    lost = [d.name for d in daemons if any(d.count(line) for line in BROKER_TROUBLE)]
    if problems and lost:
        # Duplicates and lateness then are documented (at-least-once); early never is.
        problems.append(
            f"note: {lost} lost the broker connection during the test (another run "
            "restarting RabbitMQ?): duplicates or lateness may come from that; rerun"
        )
    assert not problems, "\n".join(problems)

    wait_for(lambda: table.count() == 0, 15, lambda: f"{table.count()} rows left in th_tasks")
    for daemon in daemons:
        assert daemon.alive(), daemon.tail()
        assert daemon.terminate() == 0, daemon.tail()
        assert daemon.count("Traceback") == 0, daemon.tail()


def test_a_fast_host_clock_never_fires_early(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    env = skewed(daemon_env(database_url, amqp_url, amqp_names.exchange, "fast"))
    assert_clock_skewed(env)
    daemon = daemons.start(env, "fast")
    daemon.wait_ready()
    assert_preloaded(daemon)

    fire_and_check(event_consumer, table, database_url, [daemon], "fast", 200)


@pytest.mark.slow
def test_a_fast_and_a_true_clock_daemon_together_never_fire_early(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    true_env = daemon_env(database_url, amqp_url, amqp_names.exchange, "true")
    fast_env = skewed(daemon_env(database_url, amqp_url, amqp_names.exchange, "fast"))
    assert_clock_skewed(fast_env)
    assert_clock_skewed(true_env, 0)
    pair = [daemons.start(true_env, "true"), daemons.start(fast_env, "fast")]
    for daemon in pair:
        daemon.wait_ready()
    assert_preloaded(pair[1])

    fire_and_check(event_consumer, table, database_url, pair, "pair", 400)
