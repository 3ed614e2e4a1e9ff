"""The bounds on reads of many tasks and bulk cancels, against real
``triggerhook run`` daemons on MariaDB (docs/api.md, "Reads of many tasks"):

* a read that costs more than ``listing_timeout_ms`` is stopped by the
  server (nothing of it runs on) and answered 422 ``too_costly``, on a table
  of a million rows, where cheaper forms of the same questions still answer;
* a read whose client goes away is stopped on the server at once;
* at most ``listing_concurrency`` of them run at once: one more is answered
  503 at once, and ``/readyz`` answers meanwhile;
* a bulk cancel stops after its batch when its client goes away, and at
  ``bulk_cancel_timeout_s`` answers a ``next_cursor``, which the Python
  client follows to the end.

What runs on the server is read from ``information_schema.PROCESSLIST`` (the
sessions of the daemon's own database). A read is held running, for as long
as a test needs, by a lock the test takes: ``LOCK TABLES th_task_tags WRITE``
holds every read by tag (it waits for the table), and a row lock holds a
bulk cancel's batch that deletes that row.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from support.http import Api, api_daemon
from support.mysql import connect, with_driver
from support.waiting import wait_for
from triggerhook_client import BulkCancelled, Client

from triggerhook.domain.listing import TaskFilter
from triggerhook.errors import Interrupted
from triggerhook.runtime.interrupt import Interrupt
from triggerhook.store.mysql import MySQLStore, init_schema

ROWS = 1_000_000  # the old code's count of scheduled tasks took 0.8 s here; the limit is 0.1 s
FILL_START_MS = 4_000_000_000_000  # in 2096: nothing of it fires during the tests
FAR_MS = 4_100_000_000_000
TIMEOUT_MS = 100
CONCURRENCY = 2
BULK_TIMEOUT_S = 1
TASKS = 1500  # three batches of a bulk cancel (500 each)
FILL = (
    "INSERT INTO th_tasks (id, shard, rev, gen, fire_ms, due_ms, routing_key)"
    " SELECT CONCAT('fill-', seq), MOD(CRC32(CONCAT('fill-', seq)), 64), 1, 1,"
    " %s + seq * 10, %s + seq * 10, ELT(1 + MOD(seq, 3), 'fire.a', 'fire.b', 'fire.c')"
    f" FROM seq_1_to_{ROWS}"
)


@contextlib.contextmanager
def _daemon(mysql_url: str, amqp_url: str, **settings: int | str) -> Iterator[Api]:
    with api_daemon(mysql_url, amqp_url, **settings) as served:
        yield served
        assert served.daemon.terminate() == 0, served.daemon.tail()
        assert served.daemon.count("Traceback") == 0, served.daemon.tail()


@pytest.fixture(scope="module")
def big(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    """A daemon whose database holds a million tasks, with a 100 ms limit."""
    with _daemon(mysql_url, amqp_url, listing_timeout_ms=TIMEOUT_MS) as served:
        conn = connect(served.database_url)
        try:
            with conn.cursor() as cur:
                cur.execute(FILL, (FILL_START_MS, FILL_START_MS))
                cur.execute("ANALYZE TABLE th_tasks")
                cur.fetchall()
        finally:
            conn.close()
        yield served


@pytest.fixture(scope="module")
def guarded(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    """A daemon running at most two listing calls at once, a bulk cancel at
    most a second (then at its next batch's end), and a long read limit."""
    with _daemon(
        mysql_url,
        amqp_url,
        listing_timeout_ms=60_000,
        listing_concurrency=CONCURRENCY,
        bulk_cancel_timeout_s=BULK_TIMEOUT_S,
    ) as served:
        yield served


def running(database_url: str, text: str) -> list[str]:
    """The statements the database's sessions run now that contain ``text``."""
    conn = connect(database_url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT INFO FROM information_schema.PROCESSLIST WHERE DB = DATABASE()"
                " AND COMMAND = 'Query' AND ID <> CONNECTION_ID() AND INFO LIKE %s",
                (f"%{text}%",),
            )
            return [str(row[0]) for row in cur.fetchall()]
    finally:
        conn.close()


@contextlib.contextmanager
def tags_locked(database_url: str) -> Iterator[None]:
    """Every read of ``th_task_tags`` (a listing by tag) waits while held."""
    conn = connect(database_url)
    try:
        with conn.cursor() as cur:
            cur.execute("LOCK TABLES th_task_tags WRITE")
            yield
            cur.execute("UNLOCK TABLES")
    finally:
        conn.close()


@contextlib.contextmanager
def row_locked(api: Api, task_id: str) -> Iterator[None]:
    """A write of the task's row (a bulk cancel's batch deleting it) waits while held."""
    conn = connect(api.database_url)
    try:
        conn.begin()
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM th_tasks WHERE id = %s FOR UPDATE", (task_id,))
            assert cur.fetchall() == ((task_id,),)
        yield
        conn.rollback()
    finally:
        conn.close()


def send(api: Api, method: str, path: str, body: object = None) -> socket.socket:
    """A request on a raw connection (the test closes it to go away)."""
    port = int(api.url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    content = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(content)}\r\n"
    if body is not None:
        head += "Content-Type: application/json\r\n"
    sock.sendall(head.encode() + b"\r\n" + content)
    return sock


def error_of(response: httpx.Response) -> tuple[int, str, str]:
    error = response.json()["error"]
    return response.status_code, error["code"], error["message"]


def schedule(http: httpx.Client, tag: str) -> None:
    """TASKS tasks tagged ``tag``, in due order by index: batch 2 is 0500-0999."""
    tasks = [{"id": f"{tag}-{i:04}", "at_ms": FAR_MS + i, "tags": [tag]} for i in range(TASKS)]
    assert http.post("/v1/tasks/batch", json={"tasks": tasks}).status_code == 201


def left(http: httpx.Client, tag: str) -> int:
    return int(http.get("/v1/tasks/count", params={"tag": tag}).json()["count"])


# -- the time limit ------------------------------------------------------------------------------


def test_a_read_costing_more_than_the_limit_is_stopped_by_the_server_and_refused(
    big: Api,
) -> None:
    span = {"start_ms": str(FILL_START_MS), "bucket_ms": "2678400000", "buckets": "12"}
    with big.client() as http:
        for path, params, statement in (
            # every row, with its shard's marks
            ("/v1/tasks/count", {"state": "scheduled"}, "STRAIGHT_JOIN COUNT(*)"),
            # every row of a year (" DIV " alone also matched the shard lease
            # renewal's clock, running at that moment once in CI)
            ("/v1/tasks/timeline", span, " AS bucket, COUNT(*) "),
        ):
            response = http.get(path, params=params)
            status, code, message = error_of(response)
            assert (status, code) == (422, "too_costly"), response.text
            assert f"longer than {TIMEOUT_MS} ms" in message and "narrow the filter" in message
            # Answered once the server stopped it: nothing of it runs on.
            assert running(big.database_url, statement) == []
        # The same questions, asked so that they cost little, are answered.
        capped = http.get("/v1/tasks/count", params={"state": "scheduled", "up_to": "1000"})
        assert capped.json() == {"count": 1000, "at_least": True}
        firing = http.get("/v1/tasks", params={"state": "firing", "limit": "1"})
        assert firing.json() == {"tasks": [], "next_cursor": None}  # nothing armed: no scan
        assert len(http.get("/v1/tasks", params={"limit": "5"}).json()["tasks"]) == 5
        minutes = {"start_ms": str(FILL_START_MS), "bucket_ms": "60000", "buckets": "2"}
        counts = http.get("/v1/tasks/timeline", params=minutes).json()["routing_keys"]
        assert sum(sum(c) for c in counts.values()) == 12_000 - 1  # one every 10 ms, from seq 1


# -- abandoned reads ----------------------------------------------------------------------------


def test_a_read_whose_client_goes_away_stops_on_the_server(guarded: Api) -> None:
    with tags_locked(guarded.database_url):
        sock = send(guarded, "GET", "/v1/tasks/count?tag=held")
        wait_for(
            lambda: running(guarded.database_url, "th_task_tags"), 10, "the count did not start"
        )
        sock.close()
        # The lock is still held: only a KILL of the abandoned read ends it.
        wait_for(
            lambda: not running(guarded.database_url, "th_task_tags"),
            5,
            "the abandoned count still runs",
        )
    with guarded.client() as http:  # its slot is free again
        assert http.get("/v1/tasks/count", params={"tag": "held"}).json() == {
            "count": 0,
            "at_least": False,
        }


@pytest.mark.parametrize("driver", ["mysqldb", "pymysql"])
def test_an_interrupt_kills_the_read_in_flight_through_either_driver(
    database_url: str, driver: str
) -> None:
    init_schema(database_url)
    store = MySQLStore(with_driver(database_url, driver), "rk")
    stop = Interrupt()
    try:
        with tags_locked(database_url), ThreadPoolExecutor(1) as pool:
            read = pool.submit(store.count_where, TaskFilter(tag="held"), None, stop)
            wait_for(lambda: running(database_url, "th_task_tags"), 10, "the read did not start")
            stop.set("its client went away")  # KILL QUERY, from a connection of its own
            with pytest.raises(Interrupted, match="its client went away"):
                read.result(timeout=5)
            assert running(database_url, "th_task_tags") == []
        assert store.count_where(TaskFilter(tag="held")) == 0  # the pool serves on
    finally:
        store.close()


# -- how many at once ---------------------------------------------------------------------------


def test_listing_calls_beyond_the_limit_are_refused_at_once_and_readyz_answers(
    guarded: Api,
) -> None:
    with guarded.client(timeout_s=60) as http, ThreadPoolExecutor(10) as pool:
        with tags_locked(guarded.database_url):
            sent: list[Future[httpx.Response]] = [
                pool.submit(http.post, "/v1/tasks/cancel", json={"tag": f"none-{i}"})
                for i in range(10)
            ]
            # Two take the slots (each waits for the table in its first read) ...
            wait_for(lambda: len(running(guarded.database_url, "th_task_tags")) == CONCURRENCY, 10)
            # ... the other eight are refused at once, not queued.
            wait_for(lambda: sum(f.done() for f in sent) == 10 - CONCURRENCY, 10)
            for refused in (f.result() for f in sent if f.done()):
                assert refused.status_code == 503, refused.text
                assert refused.headers["Retry-After"] == "1"
            with guarded.client(timeout_s=5) as probe:  # a bound on the wait
                assert probe.get("/readyz").status_code == 200
                assert probe.get("/v1/tasks/count").status_code == 503  # the same bound
                assert probe.get("/v1/tasks/any-id").status_code == 404  # not the same pool
            in_flight = [f for f in sent if not f.done()]
        answers = [f.result().json() for f in in_flight]  # the table is free: they finish
        assert answers == [{"cancelled": 0, "too_late": 0, "next_cursor": None}] * CONCURRENCY


# -- bulk cancels: stopped, and going on --------------------------------------------------------


def test_a_bulk_cancel_whose_client_goes_away_stops_after_its_batch(guarded: Api) -> None:
    with guarded.client() as http:
        schedule(http, "gone")
        answered_4xx = _totals(http)["requests_4xx"]
        mark = guarded.daemon.mark()
        with row_locked(guarded, "gone-0700"):
            sock = send(guarded, "POST", "/v1/tasks/cancel", {"tag": "gone"})
            wait_for(
                lambda: running(guarded.database_url, "DELETE"),
                10,
                "the second batch did not start",
            )
            assert left(http, "gone") == TASKS - 500  # the first batch went
            sock.close()
            # Answered 499 (to nobody) once the daemon saw the client go.
            wait_for(lambda: _totals(http)["requests_4xx"] > answered_4xx, 10)
        # The batch in flight completes; the walk stops there.
        guarded.daemon.wait_for_line(
            "bulk cancel stopped (its client went away): 1000 cancelled", 10, mark
        )
        assert left(http, "gone") == TASKS - 1000
        assert http.post("/v1/tasks/cancel", json={"tag": "gone"}).json()["cancelled"] == 500


def test_a_bulk_cancel_at_its_time_limit_answers_where_to_go_on_and_the_client_follows(
    guarded: Api,
) -> None:
    with guarded.client(timeout_s=60) as http, ThreadPoolExecutor(1) as pool:
        schedule(http, "slow")
        with row_locked(guarded, "slow-0700"):
            answer = pool.submit(http.post, "/v1/tasks/cancel", json={"tag": "slow"})
            wait_for(
                lambda: running(guarded.database_url, "DELETE"),
                10,
                "the second batch did not start",
            )
            time.sleep(BULK_TIMEOUT_S + 0.2)  # past its time limit, in its second batch
        stopped = answer.result().json()
        assert (stopped["cancelled"], stopped["too_late"]) == (1000, 0)
        assert stopped["next_cursor"] is not None
        rest = http.post(
            "/v1/tasks/cancel", json={"tag": "slow", "cursor": stopped["next_cursor"]}
        ).json()
        assert rest == {"cancelled": 500, "too_late": 0, "next_cursor": None}

        schedule(http, "again")
        mark = guarded.daemon.mark()
        with Client(guarded.url) as client:
            with row_locked(guarded, "again-0700"):
                done = pool.submit(client.cancel_where, tag="again")
                wait_for(
                    lambda: running(guarded.database_url, "DELETE"),
                    10,
                    "the second batch did not start",
                )
                time.sleep(BULK_TIMEOUT_S + 0.2)
            # Two requests: the first stopped after 1,000, the second went on from there.
            assert done.result() == BulkCancelled(cancelled=TASKS, too_late=0)
        guarded.daemon.wait_for_line("bulk cancel stopped (its time limit passed)", 5, mark)
        guarded.daemon.wait_for_line("bulk cancel: 500 cancelled", 5, mark)
        assert left(http, "again") == 0


def _totals(http: httpx.Client) -> dict[str, Any]:
    totals: dict[str, Any] = http.get("/v1/status").json()["totals"]
    return totals
