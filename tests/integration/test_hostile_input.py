"""Hostile input against the real daemon (MariaDB, RabbitMQ, its HTTP API and
command queue): a time that would cost quadratic work is refused at once and
freezes nothing; a request that gave up on a hung database is never written.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from support.commands import CommandClient
from support.daemon import TaskTable, fired_ms
from support.http import ROUTED, Api, api_daemon
from support.mysql import connect
from support.waiting import now_ms, wait_for

from triggerhook.api.commands import ERROR_HEADER

# 300,000 digits: the unbounded parser spent about 5 s on one such number,
# holding the GIL (every thread of the daemon frozen), before answering.
HUGE_DIGITS = 300_000
HUGE_AT = "9" * HUGE_DIGITS
# Generous bounds (these are not benchmarks): a refused request is answered in
# milliseconds, and the engine fires within a few ms of the due time. A second
# of slack each absorbs a loaded CI machine, and is still far below the freeze.
ANSWER_WITHIN_S = 2.0
LATENESS_MAX_MS = 1000
PROBE_LEAD_MS = 500  # the probe is due this long after it is scheduled (inside a freeze)
HOSTILE_UNTIL_MS = 1000  # hostile requests go on until this long after the probe's due time

JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def api(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    with api_daemon(mysql_url, amqp_url) as daemon:
        yield daemon


@pytest.fixture
def table(api: Api) -> Iterator[TaskTable]:
    with TaskTable(api.database_url) as reader:
        yield reader


@dataclass
class Answer:
    status: int
    body: Any
    elapsed_s: float


def post(http: httpx.Client, content: bytes) -> Answer:
    started = time.perf_counter()
    response = http.post("/v1/tasks", content=content, headers=JSON)
    return Answer(response.status_code, response.json(), time.perf_counter() - started)


def test_a_huge_number_is_refused_at_once_and_the_engine_keeps_its_time(
    api: Api, table: TaskTable
) -> None:
    before = table.count()
    hostile = json.dumps({"at": HUGE_AT, "routing_key": ROUTED}).encode()
    with api.client(timeout_s=60) as http:
        due_ms = now_ms() + PROBE_LEAD_MS
        probe = {"id": "probe", "at": due_ms / 1000, "routing_key": ROUTED}
        assert http.post("/v1/tasks", json=probe).status_code == 201
        # Hostile requests, one after the other, from before until after the
        # probe's due time: had one frozen the daemon, the probe would be late.
        answers = [post(http, hostile)]
        while now_ms() < due_ms + HOSTILE_UNTIL_MS:
            answers.append(post(http, hostile))
        events = api.events.collect(1, timeout_s=15)

    assert [e.message_id for e in events] == ["probe"], "the probe did not fire"
    (event,) = events
    assert event.headers["x-due-ms"] == due_ms
    lateness_ms = fired_ms(event) - due_ms
    assert lateness_ms >= 0, "fired early"
    assert lateness_ms < LATENESS_MAX_MS, f"fired {lateness_ms} ms late: the daemon froze"
    assert len(answers) >= 2
    for answer in answers:
        assert answer.elapsed_s < ANSWER_WITHIN_S, f"answered after {answer.elapsed_s:.1f}s"
        assert answer.status == 422, answer.body
        assert answer.body["error"]["field"] == "at"
        assert "over the limit" in answer.body["error"]["message"]
        assert len(json.dumps(answer.body)) < 500  # the number is not echoed back
    wait_for(lambda: table.count() == before, 15, "a refused request left a row")


@pytest.mark.parametrize(
    ("at", "words"),
    [
        ("20261201", ["ambiguous", "1970-08-23", "2026-12-01"]),
        (20261201, ["ambiguous", "1970-08-23", "2026-12-01"]),
        ("\u0661\u0667\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660", ["ASCII"]),
        ("\uff11\uff17\uff10\uff10\uff10\uff10\uff10\uff10\uff10\uff10", ["ASCII"]),
    ],
    ids=["compact-date-text", "compact-date-number", "arabic-indic", "fullwidth"],
)
def test_ambiguous_or_non_ascii_times_are_refused_over_http(
    api: Api, table: TaskTable, at: object, words: list[str]
) -> None:
    before = table.count()
    with api.client() as http:
        answer = post(http, json.dumps({"at": at}).encode())
    assert answer.status == 422, answer.body
    assert answer.body["error"]["field"] == "at"
    for word in words:
        assert word in answer.body["error"]["message"]
    assert table.count() == before


def test_an_amqp_create_with_a_huge_time_is_dead_lettered_not_applied(
    api: Api, amqp_url: str, table: TaskTable
) -> None:
    hostile = [
        ("hostile-huge", {"id": "hostile-huge", "at": HUGE_AT}),
        ("hostile-compact", {"id": "hostile-compact", "at": "20261201"}),
        ("hostile-delay", {"id": "hostile-delay", "delay": 10**4000}),
    ]
    with CommandClient(amqp_url, api.names.commands) as commands:
        for message_id, body in hostile:
            commands.send("create", body, message_id=message_id)
        dead = commands.dead_letters(len(hostile), timeout_s=15)
        # The consumer goes on: a good command after them is applied.
        applied = commands.call("create", {"id": "after-hostile", "delay": 60})

    assert sorted(d.properties.message_id for d in dead) == sorted(m for m, _ in hostile)
    for letter in dead:
        reason = letter.headers[ERROR_HEADER]
        text = reason.decode() if isinstance(reason, bytes) else str(reason)
        field = "delay" if letter.properties.message_id == "hostile-delay" else "at"
        assert text.startswith(f"invalid: {field}: "), text
        assert len(text) < 500  # the number is not echoed back
    assert applied["ok"] is True, applied
    ids = table.ids()
    assert "after-hostile" in ids
    assert not ids & {m for m, _ in hostile}


# -- a hung database: bounded queue, and give-ups that are never written ------------------


class Request(threading.Thread):
    """One POST /v1/tasks on its own thread (it may wait for a minute)."""

    def __init__(self, api: Api, payload: str, **fields: object) -> None:
        super().__init__(name=f"post-{payload}", daemon=True)
        self.api = api
        self.payload = payload
        self.body = {"delay": 60, "payload": payload, **fields}  # due long after the test
        self.answer: Answer | None = None

    def run(self) -> None:
        with self.api.client(timeout_s=180) as http:
            self.answer = post(http, json.dumps(self.body).encode())


def _waiting_insert_s(table: TaskTable) -> int:
    """How long (whole seconds) an INSERT into th_tasks has waited for the lock; -1: none."""
    rows = table.query(
        "SELECT MAX(TIME) FROM information_schema.PROCESSLIST"
        " WHERE DB = DATABASE() AND INFO LIKE 'INSERT INTO th_tasks%%'"
    )
    return -1 if rows[0][0] is None else int(rows[0][0])


@pytest.mark.slow
def test_during_a_database_hang_the_queue_is_bounded_and_a_503_is_never_written(
    mysql_url: str, amqp_url: str
) -> None:
    """The database hangs (another session holds a table lock: every write to
    th_tasks waits, up to the driver's 30 s read timeout). One write at a time
    (batches of one), at most two calls queued:

    * A is taken by the writer and hangs; B, C and D arrive while it does.
    * Two of them queue; the third is refused at once (503, queue full).
    * When A's write times out the writer takes the first queued call (X): its
      caller's timeout comes while it is being written, so it waits for the
      real outcome. The other (Y) is still queued at its timeout: abandoned,
      answered 503 and never written, even after the database is back.

    (A cut connection would not do: a refused connection fails each write at
    once, so nothing ever queues.)
    """
    with (
        api_daemon(mysql_url, amqp_url, schedule_batch_size=1, commit_queue_max=2) as api,
        TaskTable(api.database_url) as table,
    ):
        locker = connect(api.database_url)
        try:
            with locker.cursor() as cursor:
                cursor.execute("LOCK TABLES th_tasks READ")
            first = Request(api, "a", id="stuck-a")
            first.start()
            # A's INSERT is at the database and has waited a few seconds: the
            # callers after it time out well after A's write does.
            wait_for(lambda: _waiting_insert_s(table) >= 5, 20, "A's INSERT never waited")
            later = [Request(api, payload) for payload in ("b", "c", "d")]  # id-less
            for request in later:
                request.start()

            wait_for(lambda: any(r.answer for r in later), 10, "no call refused at once")
            (refused,) = [r for r in later if r.answer is not None]
            assert refused.answer is not None and refused.answer.status == 503
            assert refused.answer.body["error"]["code"] == "unavailable"
            # At once: long before any commit timeout (30 s).
            assert refused.answer.elapsed_s < 10
            queued = [r for r in later if r is not refused]

            # A's write times out (30 s), X is taken, Y's caller gives up.
            wait_for(lambda: any(r.answer for r in queued), 60, "no queued call gave up")
            (gave_up,) = [r for r in queued if r.answer is not None]
            assert gave_up.answer is not None and gave_up.answer.status == 503
            assert gave_up.answer.body["error"]["code"] == "unavailable"
        finally:
            locker.close()  # the database is back

        (taken,) = [r for r in queued if r is not gave_up]
        taken.join(60)
        assert taken.answer is not None, "the taken call was never answered"
        assert taken.answer.status == 201, taken.answer.body  # its real outcome
        # A call queued after everything else commits: the writer went past
        # wherever a still-queued give-up would have been (it writes in order).
        after = Request(api, "after")
        after.run()
        assert after.answer is not None and after.answer.status == 201, after.answer

        payloads = {bytes(row[0]) for row in table.query("SELECT payload FROM th_tasks")}
        assert taken.payload.encode() in payloads
        assert b"after" in payloads
        assert gave_up.payload.encode() not in payloads  # answered 503: never written
        assert refused.payload.encode() not in payloads
        first.join(60)
        assert first.answer is not None and first.answer.status == 503  # its write timed out
